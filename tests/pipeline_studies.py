"""Small studies with populations (applicants, screeners, managers) on the synthetic responder."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

BASE: dict[str, Any] = {
    "name": "pipeline_test",
    "description": "applicants write, a screener shortlists, a manager picks",
    "seed": 5,
    "roles": {
        "applicant": {"backend": "synthetic", "max_tokens": 64},
        "screener": {
            "backend": "synthetic",
            "synthetic": {"selected": {"by": "race", "weights": {"White": 2.0}}},
        },
        "manager": {
            "backend": "synthetic",
            "synthetic": {"selected": {"by": "gender", "weights": {"male": 2.0}}},
        },
    },
    "personas": {
        "source": "name_bank",
        "name_bank": "an2024",
        "axes": {"race": ["White", "Black"], "gender": ["female", "male"]},
        "description": "{{ race }} {{ gender }}",
    },
    "design": {
        "agents_per_value": 8,
        "factors": {"job": {"nurse": {"title": "nurse"}, "clerk": {"title": "clerk"}}},
    },
    "populations": {
        "applicants": {"agent": "applicant", "personas": "study"},
        "screeners": {"agent": "screener", "count": 2},
        "managers": {"agent": "hiring_manager"},
    },
    "stages": [
        {
            "name": "apply",
            "population": "applicants",
            "role": "applicant",
            "prompt": "Write a cover letter for {{ title }}. Sign it {{ persona.name }}.",
        },
        {
            "name": "screen",
            "population": "screeners",
            "role": "screener",
            "reads": {
                "stage": "apply",
                "matching": "pool",
                "size": 8,
                "draw": "stratified",
                "within": ["job"],
            },
            "select": 3,
            "prompt": "Pick {{ select }} of {{ pool_size }} for {{ title }}:"
            "{% for d in documents %}\n{{ d.label }}. {{ d.name }}: {{ d.text }}{% endfor %}",
        },
        {
            "name": "offer",
            "population": "managers",
            "role": "manager",
            "reads": {"stage": "apply", "after": "screen", "matching": "pool", "draw": "carry"},
            "select": 1,
            "prompt": "Pick one:{% for d in documents %}\n{{ d.label }}. {{ d.text }}{% endfor %}",
        },
    ],
    "analyses": [
        {
            "kind": "pipeline",
            "name": "pipeline",
            "stages": ["screen", "offer"],
            "groups": ["race", "gender"],
            "n_permutations": 500,
        }
    ],
}


#: A screener stage reading each letter under a woman's and a man's name (counterfactual).
COUNTERFACTUAL_STAGE: dict[str, Any] = {
    "name": "rate",
    "population": "screeners",
    "role": "screener",
    "reads": {"stage": "apply", "counterfactual": "gender"},
    "output": {"decision": {"type": "choice", "choices": ["Interview", "Reject"]}},
    "advance": "decision == 'Interview'",
    "prompt": "Applicant {{ document.name }}:\n{{ document.text }}",
}


def study(**changes: Any) -> dict[str, Any]:
    """A copy of :data:`BASE` with top-level keys replaced."""
    out = copy.deepcopy(BASE)
    out.update(copy.deepcopy(changes))
    return out


def write(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as a study file."""
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
