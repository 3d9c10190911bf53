"""The dimensions the Bias-Transmission study scores a cover letter on, and the trait types formed
from them: plain names, apart from :mod:`.traits` (which fits models on the scores and brings
statsmodels), since a study's analyses default to them when it is only read."""

from __future__ import annotations

#: The 13 dimensions of the paper's absolute-evaluation prompt (Table 1), as answer fields.
DIMENSIONS = (
    "hireability",
    "confidence",
    "work_ethic",
    "ambition",
    "problem_solving",
    "competency",
    "trustworthiness",
    "friendliness",
    "creativity",
    "teamwork",
    "communication",
    "promoted",
    "salary",
)
#: The paper's three trait types (section 5, Tables 8-9) as means of dimensions. The paper does
#: not say which dimensions form each type: this grouping is biasim's assumption.
TRAIT_TYPES: dict[str, tuple[str, ...]] = {
    "hireability": ("hireability", "promoted", "salary"),
    "competency": (
        "confidence",
        "work_ethic",
        "ambition",
        "problem_solving",
        "competency",
        "creativity",
    ),
    "warmth": ("trustworthiness", "friendliness", "teamwork", "communication"),
}
