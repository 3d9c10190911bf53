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

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.study.config import Study, SyntheticField
from biasim.simulator.study.load import load_study
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
    """

    analysis: str
    test: str
    agents: int
    studies: int
    power: float
    false_positive_rate: float


def scale_table(table: SyntheticField, effect: float) -> dict[str, Any]:
    """A synthetic table with its effect scaled (``0``: none, ``1``: as declared)."""
    declared = table.model_dump(mode="json", exclude_defaults=True)
    if effect == 0:
        # No effect at all: every value answers as unlisted values do (the table's default, or
        # uniform over the field's own choices, which only the backend knows).
        for key in ("probabilities", "weights", "positions", "by"):
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


#: A simulated study's findings: ``(analysis, test) -> significant``.
Findings = dict[tuple[str, str], bool]


def simulate_study(job: SimulatedStudy, study: Study) -> Findings:
    """Run one simulated study (in a folder of its own, removed after) and say which of its
    tests found something at ``alpha``. Runs in any process: it needs nothing but its
    arguments and the base study file."""
    with tempfile.TemporaryDirectory(prefix="biasim-power-study-") as tmp:
        folder = Path(tmp)
        arm = folder / f"{job.arm}.yaml"
        arm.write_text(job.arm_file)
        options = RunOptions(
            study=str(world_study(arm, study, job.seed, folder)),
            out=folder / "run",
            backend="synthetic",
            agents=job.size,
            seed=job.seed,
            throwaway=not job.per_call,
        )
        outcome = execute(prepare(options))
    findings: Findings = {}
    for analysis in outcome.summary.get("analyses", []):
        for test, p in get_kind(analysis["kind"]).power_tests(analysis).items():
            hit = p is not None and not math.isnan(p) and p < job.alpha
            findings[(analysis["name"], test)] = hit
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
            "to find"
        )
    found: dict[tuple[str, str, int, str], list[bool]] = {}
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
            for (analysis, test), hit in findings.items():
                found.setdefault((analysis, test, job.size, job.arm), []).append(hit)
            clock.done(f"agents {job.size}, {job.arm}, study {job.seed - seed + 1}/{studies}")
    rows = []
    for analysis, test, size in dict.fromkeys((a, t, s) for a, t, s, _ in found):
        with_effect = found.get((analysis, test, size, "effect"), [])
        without = found.get((analysis, test, size, "null"), [])
        rows.append(
            PowerRow(
                analysis=analysis,
                test=test,
                agents=size,
                studies=studies,
                power=sum(with_effect) / len(with_effect) if with_effect else math.nan,
                false_positive_rate=sum(without) / len(without) if without else math.nan,
            )
        )
    return rows
