"""``biasim power``: how often a study's own analyses find its declared effect, and how often
they "find" one that is not there, against the number of agents per value.

The study's synthetic truth (``roles.<role>.synthetic``) is the effect. Each simulated study runs
the whole study on the synthetic backend (same design, same analyses) with a fresh seed, once
with the effect scaled by ``effect`` (1 = as declared) and once with no effect (every table at
its baseline), keeping the declared structure: unit-level heterogeneity, invalid answers, strata.
Each analysis kind names the tests a reviewer would read (``AnalysisKind.power_tests``); a test
counts as a finding when its p-value is below ``alpha``.

Scaling interpolates geometrically between the baseline ``p0`` (the table's ``default``, else
uniform over its choices, which is what values not listed get) and the declared table ``p``:
``p_e ∝ p0^(1 - e) p^e``, so ``e = 0`` is no effect and ``e = 1`` the declared truth.
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from biasim.analysis.stats.units import Tested
from biasim.simulator.common.rundir import RESULTS_PARQUET
from biasim.simulator.engine.runner import (
    PreparedRun,
    RunOptions,
    execute,
    prepare,
    study_folder,
)
from biasim.simulator.kinds import get_kind
from biasim.simulator.report.outputs import analyze
from biasim.simulator.study.config import Study, StudyConfig, SyntheticField, analysis_name
from biasim.simulator.study.load import load_study
from biasim.simulator.study.options import StudyOptions, command_line_overrides
from biasim.simulator.tools.power_draws import draw_results, fast_path_problem, template_problem
from biasim.simulator.tools.power_runs import Progress, run_studies


@dataclass(frozen=True)
class PowerRow:
    """Findings of one test at one design size.

    Attributes:
        analysis: Analysis name.
        test: The test, as its kind names it.
        agents: Agents per persona value.
        studies: Simulated studies per arm.
        power: Share of studies with the effect where the test was significant.
        false_positive_rate: Share of studies without an effect where it was.
        effect_declared: False where the synthetic truth declares no effect for the test to
            find (``power`` is then NaN: its share of findings would be a false-positive rate).
        unit: The unit the test's null reshuffled and how many, as the simulated studies' own
            test rows state it (``AnalysisKind.power_tests``), e.g. ``persona_id, 60 units``;
            a range where the simulated studies differed.
        smallest_p: The smallest p the test's units allowed in any simulated study, whatever
            the data (None: the test does not say); at or above ``alpha`` its power is 0 by
            construction (a sign-flip test over 3 replicate markets: 0.25).
    """

    analysis: str
    test: str
    agents: int
    studies: int
    power: float
    false_positive_rate: float
    effect_declared: bool = True
    unit: str = "not stated"
    smallest_p: float | None = None


def scale_table(table: SyntheticField, effect: float) -> dict[str, Any]:
    """A synthetic table with its effect scaled (``0``: none, ``1``: as declared)."""
    declared = table.model_dump(mode="json", exclude_defaults=True)
    if effect == 0:
        # No effect at all: every value answers as unlisted values do (the table's default, or
        # uniform over the field's own choices, which only the backend knows).
        for key in ("probabilities", "weights", "in_group", "positions", "mean", "by"):
            declared.pop(key, None)
        return declared
    choices = sorted(
        {c for t in table.probabilities.values() for c in t} | set(table.default or {})
    )
    base = table.default or {c: 1 / len(choices) for c in choices}

    def scaled(probabilities: dict[str, float]) -> dict[str, float]:
        weights = {
            c: (base.get(c, 0.0) ** (1 - effect)) * (probabilities.get(c, 0.0) ** effect)
            for c in choices
        }
        total = sum(weights.values())
        if total == 0:
            raise ValueError(
                f"effect {effect:g}: the declared table {probabilities} shares no choice with its "
                "baseline, so it cannot be scaled; use --effect 1 or declare a `default`"
            )
        return {c: w / total for c, w in weights.items() if w > 0}

    if table.probabilities:
        declared["probabilities"] = {v: scaled(t) for v, t in table.probabilities.items()}
    if table.weights:
        declared["weights"] = {v: w**effect for v, w in table.weights.items()}
    if table.positions:
        declared["positions"] = [w**effect for w in table.positions]
    if table.in_group is not None:
        declared["in_group"] = table.in_group**effect
    if table.mean and table.default_mean is not None:
        # A numeric answer's listed means move from the default mean toward their declared ones.
        low = table.default_mean
        declared["mean"] = {v: low + effect * (m - low) for v, m in table.mean.items()}
    return declared


def _scaled_study(study: Study, effect: float, folder: Path) -> Path:
    """A study file that extends ``study`` with every synthetic truth scaled by ``effect``."""
    roles: dict[str, Any] = {}
    for name, role in study.config.roles.items():
        if any(getattr(m, "synthetic", None) for m in role.models or []):
            raise ValueError(
                f"roles.{name}.models: power scales the role's own synthetic truth; declare the "
                "effect on the role, not per model variant"
            )
        if role.synthetic:
            roles[name] = {
                "synthetic": {f: scale_table(t, effect) for f, t in role.synthetic.items()}
            }
    path = folder / f"effect-{effect:g}.yaml"
    path.write_text(yaml.safe_dump({"extends": str(study.path), "roles": roles}))
    return path


def world_study(arm: Path, study: Study, seed: int, folder: Path) -> Path:
    """The arm's study file for one simulated study, with its own literal replicate seeds when
    the study declares them (as papers report them): otherwise every simulated study would
    replay the same draws. Unit effects are redrawn from the run seed itself (the synthetic
    backend's ``world``)."""
    declared = study.config.design.replicate_seeds
    if not declared:
        return arm
    fresh = np.random.default_rng(seed).integers(0, 2**31 - 1, size=len(declared))
    path = folder / f"{arm.stem}-world-{seed}.yaml"
    design = {"replicate_seeds": [int(s) for s in fresh]}
    path.write_text(yaml.safe_dump({"extends": str(arm), "design": design}))
    return path


@dataclass(frozen=True)
class SimulatedStudy:
    """One simulated study: its arm (and that arm's study file, as text), size and seed."""

    arm: str
    arm_file: str
    size: int
    seed: int
    alpha: float
    #: The per-call path (store, retry layer) instead of drawing answers in place: slower,
    #: the same answers; kept to check the two against each other.
    per_call: bool = False


#: A simulated study's findings: ``(analysis, test) -> (significant, unit as the test states it)``.
Findings = dict[tuple[str, str], tuple[bool, Tested]]


#: What a process keeps between its simulated studies: per design size, the rows of one
#: engine run of the study (the template of the whole-stage draws; see ``power_draws``), and
#: per arm and size, the prepared study (its synthetic backends and analyses). ``None``: that
#: size runs every study through the engine.
_TEMPLATES: dict[tuple[tuple[str, int], int], pd.DataFrame | None] = {}
_ARMS: dict[tuple[str, int, tuple[str, int]], PreparedRun] = {}


def simulate_study(job: SimulatedStudy, study: Study) -> Findings:
    """Run one simulated study and say which of its tests found something at ``alpha``. Runs
    in any process: it needs nothing but its arguments and the base study file.

    Unless ``job.per_call``, the answers are drawn a whole stage at once on the rows of one
    engine run of the design (``power_draws``), when the study allows; else the study runs
    through the engine in a folder of its own, removed after. Either way the findings depend
    on the job alone, not on the process or the order it runs jobs in."""
    template = None if job.per_call else _template(job, study)
    if template is not None:
        return _drawn_findings(job, study, template)
    with tempfile.TemporaryDirectory(prefix="biasim-power-study-") as tmp:
        folder = Path(tmp)
        arm = folder / f"{job.arm}.yaml"
        arm.write_text(job.arm_file)
        options = _options(world_study(arm, study, job.seed, folder), folder, job)
        outcome = execute(prepare(options))
    return _findings(outcome.summary, job.alpha)


def fast_path_note(study_ref: str) -> str:
    """One line for the user: whether simulated studies are drawn a whole stage at once
    (empty for a study with no synthetic truth, which ``power`` refuses)."""
    # As the simulated studies read it: every role on the synthetic backend.
    overrides = command_line_overrides(StudyOptions(backend="synthetic"))
    config = load_study(study_ref, overrides, check_backends=False).config
    if not any(role.synthetic for role in config.roles.values()):
        return ""  # nothing to simulate: `power` says so
    problem = fast_path_problem(config)
    if problem is None:
        return (
            "answers drawn a whole stage at once on the rows of one engine run per size "
            "(--per-call sends each through the engine)"
        )
    return f"every simulated study runs through the engine: {problem}"


def _options(study_file: Path, folder: Path, job: SimulatedStudy) -> RunOptions:
    return RunOptions(
        study=str(study_file),
        out=folder / "run",
        backend="synthetic",
        agents=job.size,
        seed=job.seed,
        throwaway=not job.per_call,
    )


def _template(job: SimulatedStudy, study: Study) -> pd.DataFrame | None:
    """The rows of one engine run of the arm at the job's size (its answers are redrawn by
    every study), built once per process; ``None`` (with the study's own reason) when the
    draws cannot serve it."""
    key = (_file_key(study), job.size)
    if key not in _TEMPLATES:
        config = _prepared_arm(job, study).study.config
        _TEMPLATES[key] = None
        if fast_path_problem(config) is None:
            with tempfile.TemporaryDirectory(prefix="biasim-power-template-") as tmp:
                folder = Path(tmp)
                arm = folder / f"{job.arm}.yaml"
                arm.write_text(job.arm_file)
                # Any seed gives the same rows; the study's own keeps the template one table.
                options = replace(_options(arm, folder, job), seed=config.seed)
                execute(prepare(options))
                rows = pd.read_parquet(folder / "run" / RESULTS_PARQUET)
            _TEMPLATES[key] = None if template_problem(rows, config) else rows
    return _TEMPLATES[key]


def _file_key(study: Study) -> tuple[str, int]:
    """The base study file and its modification time: a file edited between two power
    analyses in one process (the Python API) is not served the old template."""
    path = Path(study.path)
    return str(path), path.stat().st_mtime_ns if path.is_file() else 0


def _drawn_findings(job: SimulatedStudy, study: Study, template: pd.DataFrame) -> Findings:
    """One simulated study drawn on the template with the job's seed, and its findings."""
    prepared = _prepared_arm(job, study)
    config = prepared.study.config.model_copy(update={"seed": job.seed})
    backends = {role: runtime.backend for (role, _), runtime in prepared.runtimes.items()}
    results = draw_results(template, config, backends, job.seed)
    evidence = analyze(results, config, data_dir=study_folder(prepared.study), power_only=True)
    return _findings(evidence.summary, job.alpha)


def _prepared_arm(job: SimulatedStudy, study: Study) -> PreparedRun:
    """The arm's study prepared once per process and size (nothing is written)."""
    key = (job.arm_file, job.size, _file_key(study))
    if key not in _ARMS:
        # Kept for the process's life: the prepared study names its file (and data beside it).
        folder = Path(tempfile.mkdtemp(prefix="biasim-power-arm-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        arm = folder / f"{job.arm}.yaml"
        arm.write_text(job.arm_file)
        _ARMS[key] = prepare(_options(arm, folder, job))
    return _ARMS[key]


def _findings(summary: dict[str, Any], alpha: float) -> Findings:
    findings: Findings = {}
    for analysis in summary.get("analyses", []):
        for test, tested in get_kind(analysis["kind"]).power_tests(analysis).items():
            p = tested.p
            hit = p is not None and not math.isnan(p) and p < alpha
            findings[(analysis["name"], test)] = (hit, tested)
    return findings


def power(
    study_ref: str,
    agents: Sequence[int],
    *,
    studies: int = 20,
    effect: float = 1.0,
    alpha: float = 0.05,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    per_call: bool = False,
) -> list[PowerRow]:
    """Power and false-positive rate of each analysis's tests per agents-per-value.

    Args:
        study_ref: Study file or built-in name (with a synthetic truth on some role).
        agents: Agents per persona value to try.
        studies: Simulated studies per arm and design size.
        effect: Scale of the declared effect (1 = as declared).
        alpha: Significance level.
        seed: First seed; study ``i`` of each arm runs with seed ``seed + i``: its own call
            seeds, unit effects (``unit_sd``) and literal replicate seeds, so the simulated
            studies are independent draws of the world, not replays of one.
        progress: Called with a line (with the estimated time left) after each simulated
            study.
        workers: Processes to run simulated studies in (1: this process).
        ray_address: Run the simulated studies on Ray instead: ``"local"`` starts a local
            cluster, anything else is the address of a running one. Same results as locally.
        per_call: Send every answer through the per-call path (store, retry layer) instead of
            drawing it in place; the same answers, slower.

    Raises:
        ValueError: The study declares no synthetic truth, or only per model variant.
    """
    study = load_study(study_ref, check_backends=False)
    if not any(role.synthetic for role in study.config.roles.values()):
        raise ValueError(
            "the study declares no synthetic truth (roles.<role>.synthetic): there is no effect "
            "to find; declare one under a role as docs/guides/backends.md shows (its fields: "
            "SyntheticField in docs/reference/study-file.md), or start from `biasim init`, "
            "whose study declares one"
        )
    untested = [s for s in study.config.analyses if not get_kind(s.kind).has_power_tests()]
    if len(untested) == len(study.config.analyses):  # some omitted: `omitted_analyses` says
        what = ", ".join(sorted({s.kind for s in untested}))
        what = f"its analyses (kind {what}) name no test power reads" if what else "no analyses"
        raise ValueError(f"the study declares {what}: there is nothing to count")
    found: dict[tuple[str, str, int, str], list[bool]] = {}
    tested_units: dict[tuple[str, str, int], list[Tested]] = {}
    with tempfile.TemporaryDirectory(prefix="biasim-power-") as tmp:
        folder = Path(tmp)
        arms = {
            "effect": _scaled_study(study, effect, folder),
            "null": _scaled_study(study, 0, folder),
        }
        jobs = [
            SimulatedStudy(arm, path.read_text(), size, seed + i, alpha, per_call)
            for size in agents
            for arm, path in arms.items()
            for i in range(studies)
        ]
        clock = Progress(len(jobs), progress)
        for job, findings in run_studies(simulate_study, jobs, study, workers, ray_address):
            for (analysis, test), (hit, tested) in findings.items():
                found.setdefault((analysis, test, job.size, job.arm), []).append(hit)
                tested_units.setdefault((analysis, test, job.size), []).append(tested)
            clock.done(f"agents {job.size}, {job.arm}, study {job.seed - seed + 1}/{studies}")
    inert = {
        (spec.name, test)
        for spec in study.config.analyses
        for test in get_kind(spec.kind).power_no_effect(spec, study.config)
    }
    rows = []
    for analysis, test, size in dict.fromkeys((a, t, s) for a, t, s, _ in found):
        with_effect = found.get((analysis, test, size, "effect"), [])
        without = found.get((analysis, test, size, "null"), [])
        declared = (analysis, test) not in inert
        rows.append(
            PowerRow(
                analysis=analysis,
                test=test,
                agents=size,
                studies=studies,
                power=sum(with_effect) / len(with_effect) if with_effect and declared else math.nan,
                false_positive_rate=sum(without) / len(without) if without else math.nan,
                effect_declared=declared,
                unit=unit_across(tested_units[(analysis, test, size)]),
                smallest_p=smallest_reachable(tested_units[(analysis, test, size)]),
            )
        )
    return rows


def omitted_analyses(config: StudyConfig, rows: Sequence[PowerRow]) -> list[str]:
    """One line per analysis of the study that the power table leaves out, saying why: its
    kind names no test power reads (e.g. ``prism``), or no simulated study gave it one."""
    counted = {row.analysis for row in rows}
    lines = []
    for index, spec in enumerate(config.analyses):
        name = analysis_name(spec, index)
        if name in counted:
            continue
        why = (
            "its tests ran in no simulated study"
            if get_kind(spec.kind).has_power_tests()
            else f"kind {spec.kind} names no test power reads"
        )
        lines.append(f"not counted: analysis {name} ({why})")
    return lines


def smallest_reachable(tests: Sequence[Tested]) -> float | None:
    """The smallest p any of the simulated studies' tests could reach (None: not stated)."""
    floors = [t.smallest_p for t in tests if t.smallest_p is not None]
    return min(floors) if floors else None


def unit_across(tests: Sequence[Tested]) -> str:
    """One test's unit over the simulated studies: ``persona_id, 60 units``, or the range of
    counts (``58-60``) where refusals or draws changed it, or every unit named where two
    studies' tests relabelled different units (a design that changes its unit with the draw)."""
    named = sorted({t.unit for t in tests if t.unit is not None})
    if not named:
        return "not stated"
    if len(named) > 1:
        return " or ".join(named)
    lows = [t.n_units for t in tests if t.n_units is not None]
    highs = [t.n_units_high or t.n_units for t in tests if t.n_units is not None]
    if not lows:
        return named[0]
    low, high = min(lows), max(highs)
    per = " per test" if any(t.n_units_high is not None for t in tests) else ""
    return (
        f"{named[0]}, {low} units{per}" if low == high else f"{named[0]}, {low}-{high} units{per}"
    )
