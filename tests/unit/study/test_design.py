"""The design matrix: counts, stable ids, per-call seeds, crossed and one-at-a-time axes."""

from __future__ import annotations

from pathlib import Path

from biasim.simulator.study.design import call_seed, design_size, iter_design
from biasim.simulator.study.load import load_study
from tests.conftest import write_study


def test_counts_and_ids_are_stable(tmp_path: Path) -> None:
    config = load_study(write_study(tmp_path / "s.yaml", agents=3, replicates=2)).config
    specs = list(iter_design(config))
    assert len(specs) == 3 * 3 * 2
    ids = [s.agent_id for s in specs]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "default/gender=male/0/r0"
    assert ids[1] == "default/gender=male/0/r1"
    assert list(iter_design(config)) == specs  # same study, same matrix


def test_crossed_and_separate_axes(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    text = (
        write_study(path, agents=2)
        .read_text()
        .replace(
            "    gender: [male, female, non-binary]\n",
            "    gender: [male, female]\n    race: [White, Black, Asian]\n",
        )
    )
    path.write_text(text)
    crossed = list(iter_design(load_study(path).config))
    assert len(crossed) == 2 * 3 * 2
    assert {s.persona.key for s in crossed} >= {"gender=female,race=Asian"}
    path.write_text(text.replace("  description:", "  cross: false\n  description:"))
    path.write_text(path.read_text().replace("gender }}", "attributes }}"))
    separate = list(iter_design(load_study(path).config))
    assert len(separate) == (2 + 3) * 2
    assert {s.persona.key for s in separate} == {
        "gender=male",
        "gender=female",
        "race=White",
        "race=Black",
        "race=Asian",
    }


def test_name_bank_assigns_names_in_turn_when_repetition_is_declared(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    bank = (
        "  source: name_bank\n"
        "  repeat_names: true\n"
        "  names:\n"
        "    male: [James, John]\n"
        "    female: [Mary]\n"
        "    non-binary: [Alex, Sam, Robin]\n"
        "  description:"
    )
    text = write_study(path, agents=3).read_text().replace("  description:", bank)
    path.write_text(text)
    specs = list(iter_design(load_study(path).config))
    names = {(s.persona.key, s.index): s.persona.name for s in specs}
    assert names[("gender=male", 0)] == "James"
    assert names[("gender=male", 2)] == "James"
    assert names[("gender=female", 1)] == "Mary"
    assert names[("gender=non-binary", 2)] == "Robin"


def test_factors_cross_and_multiply_the_design(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    factors = (
        "  replicates: 1\n  factors:\n"
        "    tone:\n      calm: {tone_text: calm}\n      urgent: {tone_text: urgent}\n"
        "    place: {city: {where: town}, farm: {where: fields}, coast: {where: sea}}\n"
        "  record: [where]\n"
    )
    text = write_study(path, agents=2).read_text().replace("  replicates: 1\n", factors)
    path.write_text(text.replace("{{ scenario }}", "{{ scenario }} ({{ tone_text }}, {{ where }})"))
    config = load_study(path).config
    specs = list(iter_design(config))
    assert len(specs) == design_size(config) == 2 * 3 * 3 * 2
    assert len({s.agent_id for s in specs}) == len(specs)
    assert {s.condition for s in specs} == {
        f"tone={t},place={p}" for t in ("calm", "urgent") for p in ("city", "farm", "coast")
    }
    one = next(s for s in specs if s.condition == "tone=urgent,place=farm")
    assert dict(one.variables) == {"tone_text": "urgent", "where": "fields"}
    # Sharing a coordinate blanks it in the seed id, and only it.
    twin = next(s for s in specs if s.condition == "tone=calm,place=farm" and s.slot == one.slot)
    assert one.seed_id(frozenset({"tone"})) == twin.seed_id(frozenset({"tone"}))
    assert one.seed_id(frozenset({"place"})) != twin.seed_id(frozenset({"place"}))
    assert one.seed_id(frozenset()) == one.agent_id


def test_call_seeds_differ_per_unit_and_repeat_per_unit() -> None:
    seeds = {call_seed(1, f"default/gender=male/{i}/r0/decide") for i in range(1000)}
    assert len(seeds) == 1000
    assert call_seed(1, "u") == call_seed(1, "u") != call_seed(2, "u")
    assert all(0 <= s < 2**31 for s in seeds)


def test_a_population_member_and_a_market_reader_are_one_shape() -> None:
    """A population's agent and a labour market's cycle reader are built by the one function:
    the slot counts within the persona, the id puts the prefix (the cycle's too) before it."""
    from biasim.personas import Persona
    from biasim.simulator.study.design import population_member

    persona = Persona(key="gender=female", attributes=(("gender", "female"),), description="")
    plain = population_member("staff", persona, 7, 2, "staff")
    assert (plain.agent_id, plain.slot, plain.index) == (
        "staff/gender=female/07/r0",
        "gender=female/07/r0",
        7,
    )
    reader = population_member("staff", persona, 3, 3, "staff/c002")
    assert reader.agent_id == "staff/c002/gender=female/003/r0"
    assert reader.slot == "gender=female/003/r0"
    assert (reader.population, reader.condition, reader.replicate) == ("staff", "default", 0)
