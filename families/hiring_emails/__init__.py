"""Seed 001's study family, hiring-decision emails (An et al. 2024): the ``acceptance`` kind
(:mod:`.acceptance`), the email labels and their checks (:mod:`.stats.email_outcomes`, which
brings scikit-learn) and the LLM judge's prompt (:mod:`.judge_prompt`). The built-in studies
``an2024_hiring`` and the variants extending it name it (``family: hiring_emails``)."""

from __future__ import annotations

from biasim.registry import KINDS, PROMPTS


def register() -> None:
    """Register the family's kind and prompt by path (imported when a study uses them)."""
    KINDS.register(
        "acceptance",
        "biasim.families.hiring_emails.acceptance:AcceptanceKind",
        extra=("hiring", ("sklearn",)),
    )
    PROMPTS.register("email_judge_prompt", "biasim.families.hiring_emails.judge_prompt:JUDGE")
