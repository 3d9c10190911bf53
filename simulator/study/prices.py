"""The prices a study's calls are charged at: its ``prices:`` over the shipped table."""

from __future__ import annotations

from biasim.simulator.llm.pricing import Price, find_price
from biasim.simulator.study.config import RoleConfig, StudyConfig


def study_prices(config: StudyConfig) -> dict[str, Price]:
    """The study's own prices by model id."""
    return {
        model: Price(p.input, p.output, p.batch_input, p.batch_output, source="the study's prices")
        for model, p in config.prices.items()
    }


def role_price(config: StudyConfig, role: RoleConfig, model: str | None = None) -> Price | None:
    """What ``role`` (as played by ``model``, default its own) pays per token; ``None`` when
    neither the study nor the shipped table knows the model."""
    return find_price(role.backend, model or role.model, study_prices(config))
