"""(i) Issue 30 in one run, each figure beside the same figure for the code before it (the
baseline commit, checked out into a temporary folder), since the machine is shared and only a
same-run ratio means something:

- ``biasim validate`` CPU seconds for a built-in study (target <= 1 s);
- engine stage actions/s on the per-call path (synthetic responder, store on; >= 20,000);
- ``biasim power`` on the full An et al. design (41 roles x 5 templates x 4 levels, 10 agents
  per value): the wall time of 200 simulated studies x 2 arms on this machine's cores
  (<= 10 min; answers drawn a whole stage at once) and on a local Ray cluster of 2 workers,
  beside the baseline's seconds per simulated study (one study measured, the whole projected:
  the baseline would take hours).

Every measurement runs in a fresh process so imports and caches count as they do for a user.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The last commit before issue 30's changes.
BASELINE = os.environ.get("BIASIM_BENCH_BASELINE", "ab4f5b7")
VALIDATE_TARGET_S = 1.0
ENGINE_TARGET = 20_000.0
POWER_TARGET_S = 600.0
#: Simulated studies per arm (``BIASIM_BENCH_POWER_STUDIES`` for a quicker look).
POWER_STUDIES = int(os.environ.get("BIASIM_BENCH_POWER_STUDIES", "200"))

_ENGINE = """
import json, sys, tempfile
from pathlib import Path
from benchmarks.engine import STUDY
from biasim.simulator.engine.runner import RunOptions, execute, prepare
with tempfile.TemporaryDirectory() as tmp:
    study = Path(tmp) / "s.yaml"
    study.write_text(STUDY.replace("AGENTS", sys.argv[1]))
    outcome = execute(prepare(RunOptions(study=str(study), out=Path(tmp) / "run")))
print(json.dumps(len(outcome.results) / outcome.summary["timings"]["stages_s"]["decide"]))
"""

_POWER = """
import json, sys, time
from biasim.simulator.tools.power import power
kwargs = json.loads(sys.argv[1])
start = time.perf_counter()
power("an2024_hiring", [10], **kwargs)
print(json.dumps(time.perf_counter() - start))
"""


def _child(tree: Path, code: str, *args: str) -> tuple[str, float]:
    """The last line of ``code``'s output and the CPU seconds its process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    # As on a user's machine, modules compile once: a shell that sets this makes every fresh
    # process compile biasim's sources again (0.1 s of a 0.9 s `validate`).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tree, env=env, capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed in {tree}:\n{out.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "", cpu


def _baseline_tree(folder: Path) -> Path:
    """The baseline commit's files under ``folder`` (``git archive``, no work tree needed)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", BASELINE], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _validate_cpu(tree: Path, study: str = "an2024_hiring", repeats: int = 3) -> float:
    code = "from biasim.simulator.cli import main; main()"
    best = float("inf")
    extra = ("--masked-lm", "bert-base-uncased") if study == "ding2024_prism" else ()
    for _ in range(repeats):
        _, cpu = _child(
            tree,
            f"import sys; sys.argv = ['biasim', *sys.argv[1:]]; {code}",
            "validate",
            study,
            *extra,
        )
        best = min(best, cpu)
    return best


def _validate_every_study() -> dict[str, float]:
    """CPU seconds of ``biasim validate`` for each built-in study (best of 2), this code only."""
    sys.path.insert(0, str(ROOT))
    from biasim.scenarios import builtin_studies

    return {name: _validate_cpu(ROOT, name, repeats=2) for name in sorted(builtin_studies())}


def _power_seconds(tree: Path, **kwargs: Any) -> float:
    return _power_wall_and_cpu(tree, **kwargs)[0]


def _power_wall_and_cpu(tree: Path, **kwargs: Any) -> tuple[float, float]:
    """Wall seconds of a ``power`` call in a fresh process, and the CPU seconds it and its
    worker processes used (on a machine other sessions load, CPU / cores is the wall time the
    same work takes on this machine when it is idle)."""
    seconds, cpu = _child(tree, _POWER, json.dumps(kwargs))
    return float(seconds), cpu


def _engine(tree: Path, agents_per_value: int) -> float:
    return float(_child(tree, _ENGINE, str(agents_per_value))[0])


def run(agents_per_value: int = 10_000, power_studies: int = POWER_STUDIES) -> dict:
    """Every figure for this code and for the baseline, alternating so both see the same load."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        base = _baseline_tree(Path(tmp))
        out: dict[str, Any] = {"baseline": BASELINE, "cores": cores}
        out["validate_cpu_s"] = _validate_cpu(ROOT)
        out["validate_cpu_s_baseline"] = _validate_cpu(base)
        out["validate_cpu_s_by_study"] = _validate_every_study()
        engine = [
            (
                _child(ROOT, _ENGINE, str(agents_per_value))[0],
                _child(base, _ENGINE, str(agents_per_value))[0],
            )
            for _ in range(2)
        ]
        out["engine_actions_per_s"] = max(float(e[0]) for e in engine)
        out["engine_actions_per_s_baseline"] = max(float(e[1]) for e in engine)
        workers = min(cores, 2)
        out["power_studies"] = power_studies
        out["power_workers"] = workers
        out["power_full_s"], out["power_full_cpu_s"] = _power_wall_and_cpu(
            ROOT, studies=power_studies, workers=workers
        )
        # The baseline ran every study through the engine: one per arm, projected.
        baseline = _power_seconds(base, studies=1) / 2
        out["power_study_s_baseline"] = baseline
        out["power_projected_s_baseline"] = baseline * 2 * power_studies / workers
        out["power_ray_s"] = _power_seconds(
            ROOT, studies=power_studies, workers=2, ray_address="local"
        )
    out["targets"] = {
        "validate_cpu_s": VALIDATE_TARGET_S,
        "engine_actions_per_s": ENGINE_TARGET,
        "power_full_s": POWER_TARGET_S,
    }
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The table's rows: benchmark, measure, value (with the baseline ratio), target, ok."""
    t = r["targets"]

    def ok(good: bool) -> str:
        return "yes" if good else "NO"

    return [
        (
            "validate (an2024_hiring)",
            f"CPU s (baseline {r['validate_cpu_s_baseline']:.2f} s)",
            f"{r['validate_cpu_s']:.2f} "
            f"({r['validate_cpu_s_baseline'] / r['validate_cpu_s']:.1f}x)",
            f"<= {t['validate_cpu_s']:g}",
            ok(r["validate_cpu_s"] <= t["validate_cpu_s"]),
        ),
        _slowest_validate(r, t),
        (
            "engine per-call path (same run)",
            f"stage actions/s (baseline {r['engine_actions_per_s_baseline']:,.0f})",
            f"{r['engine_actions_per_s']:,.0f} "
            f"({r['engine_actions_per_s'] / r['engine_actions_per_s_baseline']:.2f}x)",
            f">= {t['engine_actions_per_s']:,.0f}",
            ok(r["engine_actions_per_s"] >= t["engine_actions_per_s"]),
        ),
        (
            "power, An et al. full design",
            f"{r['power_studies']} studies x 2 arms, {r['power_workers']} worker(s), wall s "
            f"(baseline projected {r['power_projected_s_baseline']:,.0f} s)",
            f"{r['power_full_s']:,.0f} "
            f"({r['power_projected_s_baseline'] / r['power_full_s']:.0f}x)",
            f"<= {t['power_full_s']:,.0f}",
            ok(r["power_full_s"] <= t["power_full_s"]),
        ),
        (
            "",
            f"CPU s of that run / {r['power_workers']} (its wall time on an idle machine)",
            f"{r['power_full_cpu_s'] / r['power_workers']:,.0f}",
            f"<= {t['power_full_s']:,.0f}",
            ok(r["power_full_cpu_s"] / r["power_workers"] <= t["power_full_s"]),
        ),
        (
            "",
            f"local Ray cluster, 2 workers: {r['power_studies']} studies x 2 arms, wall s",
            f"{r['power_ray_s']:,.0f}",
            "",
            "",
        ),
    ]


def _slowest_validate(r: dict[str, Any], t: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """The built-in study whose validation costs most, and how many are within the target."""
    by_study = r["validate_cpu_s_by_study"]
    name = max(by_study, key=by_study.get)
    within = sum(cpu <= t["validate_cpu_s"] for cpu in by_study.values())
    return (
        "validate, every built-in study",
        f"CPU s of the slowest ({name}); {within} of {len(by_study)} within target",
        f"{by_study[name]:.2f}",
        f"<= {t['validate_cpu_s']:g}",
        "yes" if within == len(by_study) else "NO",
    )
