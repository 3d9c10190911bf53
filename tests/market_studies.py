"""Small market studies (a pipeline over cycles with a workforce) on the synthetic responder."""

from __future__ import annotations

import copy
from typing import Any

#: Two groups, a workforce of 4, one opening a cycle filled from 2 applicants by one manager
#: drawn from the workforce who favours its own group 3 to 1; one employee leaves a cycle.
MARKET: dict[str, Any] = {
    "name": "market_test",
    "description": "a small labour market over cycles",
    "seed": 3,
    "cycles": 6,
    "market": {
        "applicants": {"population": "applicants", "per_cycle": 2},
        "workforce": 4,
        "openings": 1,
        "readers": ["managers"],
        "by": "gender",
        "attrition": {"leavers": 1},
    },
    "roles": {
        "applicant": {"backend": "synthetic", "max_tokens": 32},
        "manager": {
            "backend": "synthetic",
            "synthetic": {"selected": {"by": "gender", "in_group": 3.0}},
        },
    },
    "personas": {
        "source": "name_bank",
        "name_bank": "an2024",
        "axes": {"gender": ["female", "male"]},
        "description": "{{ gender }}",
        "repeat_names": True,
    },
    "design": {"agents_per_value": 20},
    "populations": {
        "applicants": {"agent": "applicant", "personas": "study"},
        "managers": {"agent": "hiring_manager"},
    },
    "stages": [
        {
            "name": "apply",
            "population": "applicants",
            "role": "applicant",
            "prompt": "Write a cover letter. {{ persona.name }}",
        },
        {
            "name": "offer",
            "population": "managers",
            "role": "manager",
            "reads": {"stage": "apply", "matching": "pool", "size": 2, "draw": "random"},
            "select": 1,
            "prompt": "Pick one of {{ pool_size }}:{% for d in documents %}\n"
            "{{ d.label }}. {{ d.name }}: {{ d.text }}{% endfor %}",
        },
    ],
    "analyses": [],
}


def market(**changes: Any) -> dict[str, Any]:
    """A deep copy of :data:`MARKET` with top-level ``changes`` (``market`` merged)."""
    data = copy.deepcopy(MARKET)
    for key, value in changes.items():
        if key == "market":
            data["market"].update(value)
        else:
            data[key] = value
    return data


#: A social graph by gender: each person knows 4 others, 3 of their own gender.
NETWORK: dict[str, Any] = {"model": "homophily", "degree": 4, "homophily": 0.75, "by": "gender"}


def referral_market(share: float = 0.5, **changes: Any) -> dict[str, Any]:
    """:func:`market` whose applicants are referred over :data:`NETWORK` at ``share``."""
    data = market(**changes)
    data["market"].setdefault("network", dict(NETWORK))
    data["market"].setdefault("referrals", {"share": share})
    return data
