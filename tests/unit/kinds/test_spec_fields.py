"""Options several kinds share are declared once (``simulator/kinds/spec_fields.py``): every
built-in kind with a ``groups`` option describes it alike, and every ``adjust`` option offers
exactly the methods ``analysis.stats.multiple.adjust`` implements."""

from __future__ import annotations

import typing

import numpy as np

from biasim.analysis.stats.multiple import adjust
from biasim.simulator.kinds import get_kind, kind_names
from biasim.simulator.kinds.spec_fields import Adjustment


def _options(option: str) -> dict[str, dict]:
    found = {}
    for name in kind_names():
        properties = get_kind(name).spec.model_json_schema().get("properties", {})
        if option in properties:
            found[name] = properties[option]
    return found


def test_every_groups_option_is_the_one_declaration() -> None:
    groups = _options("groups")
    assert {"pipeline", "policy_effect"} <= set(groups)  # the probe read the kinds
    first = next(iter(groups.values()))
    assert all(schema == first for schema in groups.values()), groups


def test_every_adjust_option_offers_the_methods_adjust_implements() -> None:
    methods = set(typing.get_args(Adjustment))
    p = np.array([0.01, 0.02, 0.04])
    for method in methods:  # each runs (an unknown method is refused)
        assert adjust(p, method).shape == p.shape
    options = _options("adjust")
    assert {"pipeline", "policy_effect"} <= set(options)
    assert {name: set(o["enum"]) for name, o in options.items()} == dict.fromkeys(options, methods)


def test_the_item_kinds_declare_their_share_options_once() -> None:
    """``association`` and ``picks`` (a share of pairings or picks per item against chance)
    offer ``positive``, ``category``, ``alpha`` and ``adjust`` from one declaration each: the
    same default, bounds and wording but for what is counted."""
    association, picks = (
        get_kind(k).spec.model_json_schema()["properties"] for k in ("association", "picks")
    )
    assert association["alpha"] == picks["alpha"]
    assert association["alpha"]["default"] == 0.05
    for option in ("positive", "category", "adjust"):
        a, p = association[option], picks[option]
        assert a["default"] == p["default"], option
        assert a["description"].split(" ")[:2] == p["description"].split(" ")[:2], option
    assert picks["positive"]["description"].endswith("(default: the first value).")
    assert association["adjust"]["description"].endswith("(`none`: the paper's count).")
