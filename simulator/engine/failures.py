"""When a run counts as failed because its calls failed, and the exit codes ``run`` documents.

A run whose server answered 500 to everything used to end ``complete`` with exit 0, so
``biasim run study.yaml && publish`` published an empty study. A run now fails when every call
of a stage failed, or when more than ``--max-error-rate`` of its units failed (the dispatcher
stops such a run early once 20 units have finished; this check also covers smaller runs).
Units ``skipped`` because an earlier stage of theirs failed were never asked: they count for
neither. ``invalid`` answers are answers (a model's behaviour, analysed per group), not failures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI reads the exit codes without paying for pandas
    import pandas as pd

#: Exit codes of ``biasim run`` (also in its ``--help`` and docs/guides/security.md).
EXIT_COMPLETE = 0
EXIT_BROKEN = 1  # something broke after the run directory existed, or the analysis failed
EXIT_INPUT = 2  # bad study, option, output or run directory; nothing written or changed
EXIT_CALLS_FAILED = 3  # every call of a stage failed, or the error rate passed the threshold
#: Share of units that may fail before the run counts as failed (``--max-error-rate``).
DEFAULT_MAX_ERROR_RATE = 0.5


def calls_failure(results: pd.DataFrame, max_error_rate: float | None) -> str | None:
    """Why the run's calls count as failed, or ``None`` when they do not.

    Args:
        results: The run's results table (``stage``, ``status`` and ``error`` columns).
        max_error_rate: Largest share of asked units that may fail; ``None`` for no limit.

    Returns:
        A sentence naming the stage or the rate and the commonest reason.
    """
    if not {"stage", "status", "error"} <= set(results.columns):
        return None
    asked = results[results["status"] != "skipped"]
    failed = asked[asked["status"] == "error"]
    if failed.empty:
        return None
    # Per model too: one model of a comparison whose server is down is a failed run.
    models = asked["model_label"].nunique() if "model_label" in asked.columns else 0
    by = ["stage", "model_label"] if models > 1 else ["stage"]
    for key, rows in asked.fillna({"model_label": ""}).groupby(by, sort=False):
        stage, model = (key[0], key[1]) if len(by) == 2 else (key[0], "")
        if (rows["status"] == "error").all():
            which = f"stage `{stage}`" + (f" (model `{model}`)" if model else "")
            return (
                f"every call of {which} failed ({len(rows)} of {len(rows)} units); "
                f"commonest reason: {_commonest(rows)}"
            )
    if max_error_rate is not None and len(failed) / len(asked) > max_error_rate:
        return (
            f"{len(failed)} of {len(asked)} units failed (more than --max-error-rate "
            f"{max_error_rate:.0%}); commonest reason: {_commonest(failed)}"
        )
    return None


def _commonest(failed: pd.DataFrame) -> str:
    counts = failed["error"].fillna("unknown").value_counts()
    return f"{counts.index[0]} ({int(counts.iloc[0])} units)"
