"""(b) The embedded model: tokens/s, decisions/minute, and the engine's overhead over calling
llama-cpp-python directly with the very same requests."""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from biasim.simulator.engine.runner import RunOptions, execute, prepare

TARGET_OVERHEAD = 0.05


def _direct(model_path: str, n_threads: int, requests: list[dict[str, Any]]) -> tuple[float, int]:
    """The same calls with llama-cpp-python alone, on the main thread."""
    from llama_cpp import Llama

    llm = Llama(model_path=model_path, n_ctx=2048, n_threads=n_threads, verbose=False)
    tokens = 0
    start = time.perf_counter()
    for req in requests:
        llm.reset()  # the engine's default: every call evaluated from scratch
        out = llm.create_chat_completion(
            messages=req["messages"],
            temperature=req["temperature"],
            top_p=req["top_p"],
            max_tokens=req["max_tokens"],
            seed=req["seed"],
            response_format={"type": "json_object", "schema": req["schema"]},
        )
        tokens += out["usage"]["completion_tokens"]
    elapsed = time.perf_counter() - start
    llm.close()
    return elapsed, tokens


def _engine(tmp: Path, tag: str, agents_per_value: int) -> tuple[Any, Any]:
    prepared = prepare(
        RunOptions(study="emergency_response", out=tmp / tag, agents=agents_per_value)
    )
    prepared.runtimes[("decider", "")].backend.load()  # both paths start with the model in memory
    return prepared, execute(prepared)


def run(agents_per_value: int = 6, rounds: int = 3) -> dict[str, Any]:
    """Alternate engine runs and direct runs of the same requests; compare the best of each.

    Alternating and taking minima keeps a noisy neighbour on a 2-core machine from deciding the
    comparison.
    """
    engine_times: list[float] = []
    direct_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for round_ in range(rounds):
            prepared, outcome = _engine(tmp, f"run{round_}", agents_per_value)
            engine_times.append(outcome.summary["timings"]["stages_s"]["decide"])
            if round_ == 0:
                first = outcome
                backend = prepared.runtimes[("decider", "")].backend
                with sqlite3.connect(tmp / "run0" / "calls.sqlite") as conn:
                    requests = [
                        json.loads(r[0])
                        for r in conn.execute(
                            "SELECT request FROM calls WHERE reask = 0 ORDER BY id"
                        )
                    ]
            seconds, tokens = _direct(str(backend.path), backend.n_threads, requests)
            direct_times.append(seconds)
    engine_s, direct_s = min(engine_times), min(direct_times)
    units = len(first.results)
    engine_tokens = int(first.results["completion_tokens"].sum())
    overhead = engine_s / direct_s - 1
    return {
        "decisions": units,
        "valid": int((first.results["status"] == "answered").sum()),
        "engine_s": engine_s,
        "direct_s": direct_s,
        "engine_runs_s": engine_times,
        "direct_runs_s": direct_times,
        "tokens_per_s": engine_tokens / engine_s,
        "decisions_per_min": units / engine_s * 60,
        "same_tokens_as_direct": engine_tokens == tokens,
        "overhead": overhead,
        "target_overhead": TARGET_OVERHEAD,
        "meets_target": overhead <= TARGET_OVERHEAD,
    }
