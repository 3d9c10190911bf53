"""Agents who write documents other agents read: applicants and letter writers."""

from __future__ import annotations

from biasim.agents.base import LLMAgent


class Applicant(LLMAgent):
    """A persona-endowed applicant who writes application documents (e.g. a cover letter)."""


class LetterWriter(LLMAgent):
    """Writes about a candidate (e.g. a reference letter) for others to evaluate."""
