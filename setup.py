"""Finds the packages: the design card's top-level folders install as subpackages of ``biasim``.

The repository keeps ``simulator/``, ``analysis/``, ``agents/``, ``personas/``, ``scenarios/``
and ``families/`` at its top; installed, they live under one import package, ``biasim``, so
they never collide with other distributions' ``agents`` or ``analysis`` (the openai-agents SDK
installs ``agents``).
Every subfolder with an ``__init__.py`` is found here, so a new folder cannot be left out of the
wheel (``tests/e2e/test_wheel.py`` installs the wheel and runs a study from it).
"""

from setuptools import find_packages, setup

FOLDERS = ("simulator", "analysis", "agents", "personas", "scenarios", "families")

packages = ["biasim"]
package_dir = {"biasim": "biasim"}
for folder in FOLDERS:
    packages.append(f"biasim.{folder}")
    packages += [f"biasim.{folder}.{sub}" for sub in find_packages(folder)]
    package_dir[f"biasim.{folder}"] = folder

setup(packages=packages, package_dir=package_dir)
