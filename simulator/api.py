"""The Python API: load a study, run it, and read a run directory as DataFrames.

>>> import biasim
>>> study = biasim.load_study("emergency_response", agents=2)   # validated, nothing run
>>> run = biasim.run("emergency_response", backend="synthetic", agents=2, out="runs/demo")
>>> run = biasim.load_run("runs/demo")
>>> run.results[["persona_name", "decision", "prompt"]]

Everything the command line does goes through the same functions (``prepare``, ``execute``,
``reanalyze``), so a run started here is the same run ``biasim run`` would make.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from biasim.simulator.common.rundir import CALLS, SUMMARY, read_manifest, read_run_json
from biasim.simulator.engine.failures import DEFAULT_MAX_ERROR_RATE
from biasim.simulator.engine.runner import RunOptions, execute, prepare, reanalyze
from biasim.simulator.engine.runner import load_run as _load_results
from biasim.simulator.report.outputs import FIGURES_DIR, TABLES_DIR
from biasim.simulator.study.config import Study, StudyConfig
from biasim.simulator.study.load import load_study as _load_study
from biasim.simulator.study.options import command_line_overrides

__all__ = ["Run", "analyze", "load_run", "load_study", "resume", "run"]


def load_study(study: str | Path, **overrides: Any) -> Study:
    """Load and validate a study file or built-in study, as ``biasim validate`` does.

    Args:
        study: A study file or the name of a built-in study.
        **overrides: The command line's overrides: ``backend``, ``model``, ``agents``,
            ``max_concurrency``, ``seed``.

    Returns:
        The validated study (``.config`` is the typed configuration, ``.resolved`` the merged
        YAML as a dict).

    Raises:
        InputError: What is wrong, with file, line and field.
    """
    options = RunOptions(study=str(study), **_only(overrides, _OVERRIDES))
    return _load_study(str(study), command_line_overrides(options))


def run(
    study: str | Path,
    *,
    out: str | Path | None = None,
    replay: str | Path | None = None,
    max_error_rate: float | None = DEFAULT_MAX_ERROR_RATE,
    allow_endpoints: tuple[str, ...] = (),
    trust_backends: tuple[str, ...] = (),
    **overrides: Any,
) -> Run:
    """Run a study and return its run directory, read back.

    Ctrl-C stops the run as on the command line (calls in flight finish, everything answered
    is saved), then raises ``KeyboardInterrupt``; continue with :func:`resume`.

    Args:
        study: A study file or the name of a built-in study.
        out: The run directory (default ``runs/NAME-TIME``); must not exist or be empty.
        replay: An earlier run directory whose stored answers are used first.
        max_error_rate: The run fails (resumable) when more than this share of units fail.
        allow_endpoints: Hosts the study may send requests and keys to (``--allow-endpoint``).
        trust_backends: Backends to run without a declaration (``--trust-backend``).
        **overrides: ``backend``, ``model``, ``agents``, ``max_concurrency``, ``seed``.

    Raises:
        InputError: A bad study, option or output directory (nothing is written).
        RuntimeError: The run failed (its calls failed, or something broke); its directory
            says why and ``resume`` continues it.
    """
    options = RunOptions(
        study=str(study),
        out=Path(out) if out is not None else None,
        replay=Path(replay) if replay is not None else None,
        max_error_rate=max_error_rate,
        allow_endpoints=tuple(allow_endpoints),
        trust_backends=tuple(trust_backends),
        **_only(overrides, _OVERRIDES),
    )
    return _finish(execute(prepare(options)))


def resume(
    run_dir: str | Path,
    *,
    max_concurrency: int | None = None,
    allow_endpoints: tuple[str, ...] = (),
    trust_backends: tuple[str, ...] = (),
) -> Run:
    """Continue a stopped run: only what was not answered is asked (the hosts and backends
    are confirmed again, as with ``--resume``).

    Raises:
        InputError: ``run_dir`` is not a run directory, or a host is not allowed.
    """
    options = RunOptions(
        resume=Path(run_dir),
        max_concurrency=max_concurrency,
        allow_endpoints=tuple(allow_endpoints),
        trust_backends=tuple(trust_backends),
    )
    return _finish(execute(prepare(options)))


def analyze(run_dir: str | Path, *, accept_edits: bool = False) -> Run:
    """Redo a run's analyses from its stored results (no call), as ``biasim analyze`` does
    (``accept_edits`` as ``--accept-edits``)."""
    reanalyze(Path(run_dir), accept_edits=accept_edits)
    return load_run(run_dir)


def load_run(run_dir: str | Path) -> Run:
    """Read a run directory (results edited after the run are refused, unless accepted
    before with ``analyze(..., accept_edits=True)``).

    Raises:
        InputError: Not a run directory with results, or results edited after the run.
    """
    path = Path(run_dir)
    study, results = _load_results(path)
    return Run(
        path=path,
        study=study.config,
        manifest=read_manifest(path),
        summary=read_run_json(path / SUMMARY, required=False),
        answers=results,
    )


@dataclass
class Run:
    """A run directory, read.

    Attributes:
        path: The directory.
        study: The study as it was run.
        manifest: ``manifest.json`` (status, sessions, versions, the study's resolved YAML).
        summary: ``summary.json`` (every analysis's numbers, accounting, timings).
        answers: The results table as stored (one row per unit and stage).
    """

    path: Path
    study: StudyConfig
    manifest: dict[str, Any]
    summary: dict[str, Any]
    answers: pd.DataFrame = field(repr=False)

    @property
    def status(self) -> str:
        """``complete``, ``interrupted``, ``failed`` or ``running`` (``aborted`` in runs
        made before failed calls made a run ``failed``)."""
        return str(self.manifest.get("status", "unknown"))

    @cached_property
    def calls(self) -> pd.DataFrame:
        """Every call in the store (cache hits and re-asks included), with its request."""
        with sqlite3.connect(f"file:{self.path / CALLS}?mode=ro", uri=True) as conn:
            return pd.read_sql_query("SELECT * FROM calls ORDER BY id", conn)

    @cached_property
    def results(self) -> pd.DataFrame:
        """The results table with what each unit was sent: ``system`` and ``prompt`` (the
        rendered texts) and ``messages`` (the whole conversation as JSON).

        A unit of a stage with ``shared_across`` that did not send the request itself (another
        unit asked it for both) has no prompt of its own: NA there.
        """
        sent = self.calls.query("reask == 0").drop_duplicates(["unit_id", "stage"], keep="last")
        texts = pd.DataFrame(
            [_texts(request) for request in sent["request"]],
            columns=["system", "prompt", "messages"],
            index=sent.index,
        )
        prompts = pd.concat([sent[["unit_id", "stage"]], texts], axis=1)
        return self.answers.merge(prompts, on=["unit_id", "stage"], how="left", validate="1:1")

    @cached_property
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table the analyses wrote (``tables/NAME.csv``), by name."""
        return {p.stem: pd.read_csv(p) for p in sorted((self.path / TABLES_DIR).glob("*.csv"))}

    @property
    def figures(self) -> list[Path]:
        """The figures the analyses drew."""
        return sorted((self.path / FIGURES_DIR).glob("*.png"))

    @property
    def report(self) -> Path:
        """``report.html``."""
        return self.path / "report.html"


_OVERRIDES = ("backend", "model", "agents", "max_concurrency", "seed")


def _only(overrides: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; the options are {list(allowed)}")
    return overrides


def _texts(request: str) -> tuple[str | None, str | None, str]:
    messages = orjson.loads(request).get("messages") or []
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    prompt = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), None)
    return system, prompt, orjson.dumps(messages).decode()


def _finish(outcome: Any) -> Run:
    if outcome.status == "interrupted":
        raise KeyboardInterrupt(
            f"run interrupted; continue with biasim.resume({str(outcome.out)!r})"
        )
    if outcome.status != "complete":
        raise RuntimeError(
            f"run {outcome.status}: {outcome.message}; everything answered is saved; "
            f"continue with biasim.resume({str(outcome.out)!r})"
        )
    return load_run(outcome.out)
