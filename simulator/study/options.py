"""Command-line options that replace fields of a study (``--backend``, ``--agents``, ...).

Each option becomes an :class:`~biasim.simulator.study.load.Override` of one field path, so a
problem it causes names the option instead of a file line. ``--masked-lm`` and ``--postings``
set fields of the PRISM analysis; their names are the study's (the kind reads the same ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study.config import Study
from biasim.simulator.study.load import Override, load_study

#: The kind name of PRISM analyses and the design factor that holds their postings.
PRISM_KIND = "prism"
POSTING_FACTOR = "posting"


@dataclass
class StudyOptions:
    """The options of ``biasim run`` and ``validate`` that change the study."""

    study: str | None = None
    backend: str | None = None
    model: str | None = None
    agents: int | None = None
    max_concurrency: int | None = None
    seed: int | None = None
    masked_lm: str | None = None
    postings: Path | None = None
    biographies: Path | None = None
    #: USD: stop sending calls once the run's cost would pass it (``--cost-limit``).
    cost_limit: float | None = None
    #: A YAML file of model prices over the shipped table (``--prices``).
    prices: Path | None = None
    #: Every role through its provider's batch API (``--batch``).
    batch: bool = False


def command_line_overrides(options: StudyOptions) -> list[Override]:
    """The fields of the study the command line's options replace."""
    every_role = ("roles", "*")
    out: list[Override] = []
    if options.backend is not None:
        # Options belong to the backend a role used before; the synthetic block only to synthetic.
        drop = ("options",) + (("synthetic",) if options.backend != "synthetic" else ())
        out.append(Override("--backend", (*every_role, "backend"), options.backend, drop))
    if options.model is not None:
        out.append(Override("--model", (*every_role, "model"), options.model))
    if options.max_concurrency is not None:
        out.append(
            Override("--max-concurrency", (*every_role, "max_concurrency"), options.max_concurrency)
        )
    if options.agents is not None:
        out.append(Override("--agents", ("design", "agents_per_value"), options.agents))
    if options.seed is not None:
        out.append(Override("--seed", ("seed",), options.seed))
    if options.cost_limit is not None:
        out.append(Override("--cost-limit", ("cost_limit",), options.cost_limit))
    if options.batch:
        out.append(Override("--batch", (*every_role, "batch"), True))
    if options.prices is not None:
        for model, price in _price_file(options.prices).items():
            out.append(Override("--prices", ("prices", model), price))
    prism = (("kind", PRISM_KIND),)
    if options.masked_lm is not None:
        # A folder is recorded absolute, so `biasim analyze RUN_DIR` finds it from anywhere.
        local = Path(options.masked_lm).expanduser()
        value = str(local.resolve()) if local.exists() else options.masked_lm
        out.append(Override("--masked-lm", ("analyses", "*", "masked_lm"), value, match=prism))
    if options.postings is not None:
        postings = str(options.postings.expanduser().resolve())
        out.append(Override("--postings", ("design", "factors", POSTING_FACTOR), postings))
    if options.biographies is not None:
        # Absolute, like --postings: the file is read at load, relative to where it was typed.
        bios = str(options.biographies.expanduser().resolve())
        out.append(
            Override(
                "--biographies",
                ("biographies", "file"),
                bios,
                drop=("rows",),
                requires=("biographies",),
            )
        )
    return out


def _price_file(path: Path) -> dict[str, Any]:
    """The models and prices of a ``--prices`` file (YAML, shaped like a study's ``prices:``).

    Raises:
        InputError: Unreadable, or not a mapping of model ids to mappings.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError([Problem("--prices", None, "", f"cannot read {path}: {exc}")]) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(
            [
                Problem(
                    "--prices",
                    None,
                    "",
                    f"{path}: expected model ids mapped to {{input: USD, output: USD, "
                    "batch_input: USD, batch_output: USD}} per million tokens",
                )
            ]
        )
    return {str(model): price for model, price in data.items()}


def load_options_study(options: StudyOptions) -> Study:
    """The study ``options.study`` names, with the command line's overrides, fully checked.

    Raises:
        InputError: Bad study or option (exit code 2).
    """
    assert options.study is not None
    study = load_study(options.study, command_line_overrides(options))
    _check_prism_options(options, study)
    return study


def _check_prism_options(options: StudyOptions, study: Study) -> None:
    """``--masked-lm`` and ``--postings`` belong to studies with a PRISM analysis."""
    if any(spec.kind == PRISM_KIND for spec in study.config.analyses):
        return
    given = (("--masked-lm", options.masked_lm), ("--postings", options.postings))
    problems = [
        Problem(flag, None, "", f"the study has no `{PRISM_KIND}` analysis to use it")
        for flag, value in given
        if value is not None
    ]
    if problems:
        raise InputError(problems)
