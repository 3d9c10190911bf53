"""biasim: agent-based simulation for auditing social bias in what language models decide and write.

The repository keeps the design card's folders (``simulator/``, ``analysis/``, ``agents/``,
``personas/``, ``scenarios/``); installed, they are the subpackages ``biasim.simulator``,
``biasim.analysis`` and so on.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Run from a source checkout without installing (a worktree on PYTHONPATH), the subpackages are
# the checkout's top-level folders; installed, they sit inside this package and this is a no-op.
if not (_HERE / "simulator").is_dir() and (_HERE.parent / "simulator").is_dir():
    __path__.append(str(_HERE.parent))

__version__ = "0.1.0"

#: The public API, imported on first use so the command line starts without pandas or Mesa.
_API = {"Run", "analyze", "load_run", "load_study", "resume", "run"}

__all__ = ["Run", "__version__", "analysis", "analyze", "load_run", "load_study", "resume", "run"]


def __getattr__(name: str) -> object:
    if name in _API:
        from biasim.simulator import api

        return getattr(api, name)
    if name == "analysis":
        import importlib

        return importlib.import_module("biasim.analysis")
    raise AttributeError(f"module 'biasim' has no attribute {name!r}")
