"""The synthetic reader's declared in-group preference: a reader favours authors of its own
group, by the declared factor, on top of any weights (the source of feedback in a market)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import orjson
import pytest

from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.llm.types import LLMRequest
from biasim.simulator.study.config import SyntheticField

PICK_ONE_OF_TWO = {
    "type": "object",
    "properties": {
        "selected": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {"type": "integer", "minimum": 1, "maximum": 2},
        }
    },
}
SHOWN = ((("gender", "female"),), (("gender", "male"),))
DRAWS = 4000


def share_of_first(truth: SyntheticField, reader: str) -> float:
    backend = SyntheticBackend(
        SimpleNamespace(options={}, model=None, synthetic={"selected": truth})
    )
    firsts = 0
    for seed in range(DRAWS):
        request = LLMRequest(
            messages=({"role": "user", "content": "pick one"},),
            temperature=0.0,
            top_p=1.0,
            max_tokens=8,
            seed=seed,
            json_schema=PICK_ONE_OF_TWO,
            attributes=(("gender", reader),),
            shown=SHOWN,
        )
        firsts += orjson.loads(backend.answer(request).text)["selected"] == [1]
    return firsts / DRAWS


@pytest.mark.parametrize(
    ("truth", "reader", "expected"),
    [
        (SyntheticField(by="gender", in_group=3.0), "female", 3 / 4),
        (SyntheticField(by="gender", in_group=3.0), "male", 1 / 4),
        # With weights: the female author weighs 3 (in-group) against the male author's 2.
        (SyntheticField(by="gender", in_group=3.0, weights={"male": 2.0}), "female", 3 / 5),
        (SyntheticField(by="gender", weights={"male": 2.0}), "female", 1 / 3),
    ],
)
def test_a_reader_picks_its_own_group_by_the_declared_factor(
    truth: SyntheticField, reader: str, expected: float
) -> None:
    se = math.sqrt(expected * (1 - expected) / DRAWS)
    assert abs(share_of_first(truth, reader) - expected) < 4 * se


def test_in_group_needs_one_axis() -> None:
    with pytest.raises(ValueError, match="`in_group` needs `by`"):
        SyntheticField(in_group=2.0)


def test_an_undeclared_in_group_leaves_the_identity_as_it_was() -> None:
    role = SimpleNamespace(options={}, model=None, synthetic={"selected": SyntheticField()})
    assert "in_group" not in orjson.dumps(SyntheticBackend(role).identity()).decode()


def test_power_scales_the_in_group_preference_and_its_null_has_none() -> None:
    from biasim.simulator.tools.power import scale_table

    table = SyntheticField(by="gender", in_group=4.0)
    assert scale_table(table, 0) == {}
    assert scale_table(table, 0.5)["in_group"] == pytest.approx(2.0)
    assert scale_table(table, 1)["in_group"] == pytest.approx(4.0)
