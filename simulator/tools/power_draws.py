"""Whole-stage synthetic draws for ``biasim power``: a simulated study without the engine.

Between two simulated studies of one design size only the answers change: the same agents,
design cells and stages give the same rows, and the synthetic backend never reads the prompt it
is sent, only the persona and design values its declared truth is keyed on. So the first study
of a size runs through the engine as any run does, and its results table becomes the
*template*; every later study keeps the template's rows and redraws each stage's answer columns
at once (numpy) from the same tables the per-call responder draws from
(``SyntheticBackend.choice_table``: the declared probabilities, the unit's own shift, the
run's ``world``), then runs only the tests power reads. No prompt is rendered, no agent is
built, no call goes through the retry layer or a store.

The draws are equal in distribution to the per-call path's, not equal draw by draw (that path
seeds each call from a hash of its prompt). Unit effects are the same draws: a unit's shift is a
function of the unit and the run's seed on both paths.

What a study needs for this path is listed by :func:`fast_path_problem`; a study that lacks it
runs every simulated study through the engine, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd

from biasim.personas.attributes import attribute_key
from biasim.simulator.llm.structured import output_schema
from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.study.config import StageConfig, StudyConfig
from biasim.simulator.study.templating import reads_answers

#: Columns of the results table a synthetic answer may set besides its output fields.
_TEXT_COLUMNS = ("text", "raw_text")


def fast_path_problem(study: StudyConfig) -> str | None:
    """Why the study's answers cannot be drawn a whole stage at once, or ``None`` when they can.

    A stage qualifies when its answer depends on nothing but the agent's persona and design
    values: no documents read or shown, no pairing, no log-probabilities, no completion
    formatter, no requests shared across agents, choices fixed in the study, and a ``when`` that
    reads no earlier answer. Its role must be played by one synthetic model without declared
    latency or faults.
    """
    if study.populations:
        return "a pipeline (populations): readers read the documents drawn before them"
    for stage in study.stages:
        problem = _stage_problem(stage, study)
        if problem:
            return f"stage `{stage.name}`: {problem}"
    return None


def _stage_problem(stage: StageConfig, study: StudyConfig) -> str | None:
    role = study.roles[stage.role]
    checks = (
        (stage.reads is not None, "it reads other agents' documents"),
        (stage.pairing is not None, "its trials show items and targets"),
        (stage.answer == "logprobs", "it is answered with log-probabilities"),
        (stage.completion is not None, "a formatter extracts its answers"),
        (bool(stage.shared_across), "agents share requests (shared_across)"),
        (not stage.forced_choice, "its choices are not enforced (forced_choice: false)"),
        (
            bool(stage.when and reads_answers(stage.when, study.personas.writer is not None)),
            "its `when` reads earlier answers",
        ),
        (bool(role.models), f"role `{stage.role}` lists several models"),
        (bool(role.options), f"role `{stage.role}` declares backend options (latency, faults)"),
    )
    for failed, why in checks:
        if failed:
            return why
    for name, field in (stage.output or {}).items():
        if getattr(field, "choices_from", None) or getattr(field, "type", None) not in {
            "choice",
            "string",
            "integer",
            "number",
            "boolean",
        }:
            return f"output `{name}` is not a fixed choice, string, number or boolean"
    return None


def template_problem(template: pd.DataFrame, study: StudyConfig) -> str | None:
    """Why a finished run's results cannot serve as the template: a stage the engine added
    (persona writing), or an answer that was not a plain success (a declared fault)."""
    declared = {s.name for s in study.stages}
    extra = sorted(set(template["stage"]) - declared)
    if extra:
        return f"the engine added stage(s) {', '.join(extra)}"
    if not template["valid"].fillna(False).astype(bool).all():
        return "some answers of the template run were not valid"
    return None


def draw_results(
    template: pd.DataFrame,
    study: StudyConfig,
    backends: dict[str, SyntheticBackend],
    seed: int,
) -> pd.DataFrame:
    """The template's rows with every stage's answers drawn afresh with ``seed``.

    Args:
        template: Results of one run of the same study and design size.
        study: The study as this simulated study runs it (its truth and ``seed``).
        backends: Role -> the synthetic backend that plays it.
        seed: This simulated study's seed.
    """
    rng = np.random.default_rng(seed)
    out = template.copy()
    stages = out["stage"].to_numpy()
    for stage in study.stages:
        rows = np.flatnonzero(stages == stage.name)
        if not len(rows):
            continue
        role = study.roles[stage.role]
        world = str(study.seed if role.seed is None else role.seed)
        backend = backends[stage.role]
        cells = out.iloc[rows]
        fields = list(stage.output or {"text": None})
        if any("persona" in _keys(backend.field(f)) for f in fields):
            cells = _with_persona(cells, list(study.personas.axes))
        if stage.output:
            _draw_structured(out, rows, cells, stage, backend, world, rng)
        else:
            text = _draw_text(cells, backend, world, rng)
            for column in _TEXT_COLUMNS:
                _assign(out, column, rows, text)
    return out


def _draw_structured(
    out: pd.DataFrame,
    rows: np.ndarray,
    cells: pd.DataFrame,
    stage: StageConfig,
    backend: SyntheticBackend,
    world: str,
    rng: np.random.Generator,
) -> None:
    """Each output field drawn for the stage's rows, and the answers' JSON as ``raw_text``."""
    schema = output_schema(stage.output or {}, forced=stage.forced_choice).json_schema
    drawn: dict[str, list[Any]] = {}
    for name, prop in schema.get("properties", {}).items():
        drawn[name] = _draw_field(cells, backend, name, prop, world, rng)
        _assign(out, name, rows, drawn[name])
    names = list(drawn)
    raw = [
        orjson.dumps(dict(zip(names, values, strict=True))).decode()
        for values in zip(*drawn.values(), strict=True)
    ]
    _assign(out, "raw_text", rows, raw)


def _draw_text(
    cells: pd.DataFrame, backend: SyntheticBackend, world: str, rng: np.random.Generator
) -> list[Any]:
    """A free-text stage: whole texts from the declared ``text`` table (as the per-call
    responder draws them), else its fixed text."""
    spec = backend.field("text")
    if spec is not None and (spec.probabilities or spec.default):
        tables = [*spec.probabilities.values(), *([spec.default] if spec.default else [])]
        enum = sorted({t for table in tables for t in table})
        return _draw_choice(cells, backend, "text", {"enum": enum}, world, rng.random(len(cells)))
    text = spec.text if spec is not None and spec.text else "synthetic text"
    return [text] * len(cells)


def _draw_field(
    cells: pd.DataFrame,
    backend: SyntheticBackend,
    name: str,
    prop: dict[str, Any],
    world: str,
    rng: np.random.Generator,
) -> list[Any]:
    """One structured field for every row, as ``SyntheticBackend._draw`` draws it per call."""
    n = len(cells)
    spec = backend.field(name)
    if "enum" in prop:
        return _draw_choice(cells, backend, name, prop, world, rng.random(n))
    kind = prop.get("type")
    if kind in ("integer", "number") and spec is not None and spec.default_mean is not None:
        return _draw_normal(cells, spec, kind == "integer", rng.standard_normal(n))
    if kind == "string":
        text = spec.text if spec is not None and spec.text else f"synthetic {name}"
        return [text[: prop["maxLength"]] if "maxLength" in prop else text] * n
    if kind == "boolean":
        return [bool(b) for b in rng.random(n) < 0.5]
    return [{"integer": 0, "number": 0.0}.get(str(kind))] * n


def _draw_choice(
    cells: pd.DataFrame,
    backend: SyntheticBackend,
    name: str,
    prop: dict[str, Any],
    world: str,
    u: np.ndarray,
) -> list[Any]:
    """A choice per row: rows that share the values the table is keyed on share one table
    (with their unit's shift), and each row's uniform draw picks its choice."""
    keys = _keys(backend.field(name))
    codes, combos = _combos(cells, keys)
    picked = np.empty(len(cells), dtype=object)
    for code, combo in enumerate(combos):
        attributes = dict(zip(keys, combo, strict=True))
        attributes["world"] = world
        choices, cumulative = backend.choice_table(name, prop, attributes)
        mine = np.flatnonzero(codes == code)
        # The first edge above u, as the per-call draw walks the cumulative table.
        index = np.searchsorted(np.asarray(cumulative), u[mine], side="right")
        picked[mine] = np.asarray(choices, dtype=object)[np.minimum(index, len(choices) - 1)]
    return picked.tolist()


def _draw_normal(cells: pd.DataFrame, spec: Any, integer: bool, z: np.ndarray) -> list[Any]:
    """A numeric field: N(mean for the row's value, sd), rounded for integers and clipped."""
    keys = _keys(spec)
    codes, combos = _combos(cells, keys)
    means = np.empty(len(combos))
    for code, combo in enumerate(combos):
        value = "|".join(str(v) for v in combo[: len(_by(spec))]) if _by(spec) else None
        mean = spec.mean.get(value) if value is not None else None
        means[code] = spec.default_mean if mean is None else mean
    draw = means[codes] + spec.sd * z
    if integer:
        draw = np.round(draw)
    if spec.bounds is not None:
        draw = np.clip(draw, spec.bounds[0], spec.bounds[1])
    return [int(v) for v in draw] if integer else [float(v) for v in draw]


def _with_persona(cells: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """The rows with ``persona``, the unit a truth keyed on ``persona`` means: the persona's
    attribute key (``attribute_key`` of the axes it has) and its agent index, as the agent
    sends it (``ScenarioAgent._design_keys``)."""
    present = [a for a in axes if a in cells]
    values = cells[present].astype(object).where(cells[present].notna(), None)
    combos = values.drop_duplicates()
    keys = {
        tuple(row): attribute_key(
            {a: v for a, v in zip(present, row, strict=True) if v is not None}
        )
        for row in combos.itertuples(index=False, name=None)
    }
    key = pd.Series(
        [keys[tuple(r)] for r in values.itertuples(index=False, name=None)], index=cells.index
    )
    return cells.assign(persona=key + "/" + cells["agent_index"].astype(str))


def _by(spec: Any) -> list[str]:
    if spec is None or not spec.by:
        return []
    return [spec.by] if isinstance(spec.by, str) else list(spec.by)


def _keys(spec: Any) -> list[str]:
    """The results columns a field's table is keyed on: its ``by`` values, then its unit."""
    keys = _by(spec)
    if spec is not None and spec.unit_sd and spec.unit:
        keys.append(spec.unit)
    return keys


def _combos(cells: pd.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Per row, the index of its combination of ``keys`` values (as text), and the
    combinations."""
    if not keys:
        return np.zeros(len(cells), dtype=np.int64), [()]
    values = cells[list(keys)].fillna("").astype(str)
    codes = values.groupby(list(keys), sort=False).ngroup().to_numpy()
    # Groups are numbered in order of first appearance, as drop_duplicates keeps them.
    uniques = values.drop_duplicates().itertuples(index=False, name=None)
    return codes, list(uniques)


def _assign(out: pd.DataFrame, column: str, rows: np.ndarray, values: Sequence[Any]) -> None:
    """Set ``column`` at ``rows`` (positions), keeping the column's type where it can."""
    if column not in out.columns:
        out[column] = None
    old = out[column]
    new = old.to_numpy(dtype=object, copy=True)
    new[rows] = np.asarray(values, dtype=object)
    out[column] = pd.Series(new, index=out.index).astype(old.dtype)
