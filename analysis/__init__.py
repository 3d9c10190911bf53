"""Statistics and text analyses on plain DataFrames. Nothing here imports the engine."""

from .parity import (
    ParityTest,
    demographic_parity_difference,
    group_rates,
    parity_null_dpd,
    parity_test,
    status_rates,
    wilson_interval,
)

__all__ = [
    "ParityTest",
    "demographic_parity_difference",
    "group_rates",
    "parity_null_dpd",
    "parity_test",
    "status_rates",
    "wilson_interval",
]
