"""The synthetic responder: a seeded test double with declared ground truth, not a language model.

Its choice probabilities per persona attribute value come from the study file, so a test or a
power analysis knows the true disparity the analysis must recover. Everything it produces is
labelled synthetic in results and reports.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import statistics
import zlib
from typing import Any

import orjson

from biasim.simulator.llm.egress import NO_EGRESS, Egress
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError
from biasim.simulator.llm.logprobs import value_start
from biasim.simulator.llm.types import LLMRequest, LLMResponse

_MASK64 = (1 << 64) - 1


def uniform(seed: int, salt: int) -> float:
    """A uniform draw in [0, 1) from ``(seed, salt)`` by the SplitMix64 finaliser.

    Stateless and several times cheaper than seeding a ``random.Random`` per call; call seeds
    are already independent hashes of the unit ids.
    """
    z = (seed * 0x9E3779B97F4A7C15 + (salt + 1) * 0xD1B54A32D192ED03) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return ((z ^ (z >> 31)) >> 11) * (1.0 / (1 << 53))


#: The model name results carry when a synthetic role names none.
DEFAULT_MODEL = "synthetic-responder"


class SyntheticBackend:
    """Draws each answer from the declared probabilities with the call's seed.

    Options:
        latency_ms: Simulated latency per call (lets tests interrupt a run mid-stage).
        fail_rate: Share of calls that fail for good, drawn from each call's seed (declared
            faults: what the run and its analyses do with units that never answered).
    """

    name = "synthetic"
    synthetic = True
    default_concurrency = 64

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """A test double: it contacts no server and reads no key."""
        return NO_EGRESS

    def __init__(self, role: Any) -> None:
        self._fields: dict[str, Any] = dict(getattr(role, "synthetic", {}) or {})
        options = dict(role.options)
        self._latency = float(options.pop("latency_ms", 0)) / 1000.0
        if self._latency < 0:
            raise BackendConfigError("latency_ms must be >= 0", field="options.latency_ms")
        self._fail_rate = float(options.pop("fail_rate", 0))
        if not 0 <= self._fail_rate <= 1:
            raise BackendConfigError("fail_rate must lie in [0, 1]", field="options.fail_rate")
        if options:
            raise BackendConfigError(
                f"unknown option(s) {sorted(options)}; the synthetic backend takes "
                "`latency_ms` and `fail_rate`",
                field="options",
            )
        self._model = role.model or DEFAULT_MODEL
        # Seeds do not depend on the model (see AgentSpec.seed_id); mixing in the declared
        # truth keeps two synthetic "models" of one study independent draws, as two real
        # models are, instead of sharing every random number.
        self._salt = zlib.crc32(orjson.dumps(self.identity(), option=orjson.OPT_SORT_KEYS))
        # Tables are resolved once per (field, attribute value) rather than per call.
        self._tables: dict[tuple[Any, ...], tuple[list[str], list[float]] | None] = {}

    def field(self, name: str) -> Any:
        """The declared truth of answer field ``name`` (``None`` when none is declared)."""
        return self._fields.get(name)

    def identity(self) -> dict[str, Any]:
        """The declared ground truth: changing it changes every answer."""
        return {
            "backend": self.name,
            "model": self._model,
            "synthetic": {k: _declared(v) for k, v in self._fields.items()},
        }

    @property
    def immediate(self) -> bool:
        """True when an answer needs no waiting (no declared latency): the engine may then
        draw it in place, without the event loop or the retry layer. A subclass that wraps
        ``generate`` (a plug-in or test double) is always awaited, so its wrapper runs."""
        overridden = type(self).generate is not SyntheticBackend.generate
        return not self._latency and not overridden

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """Draw an answer for ``request`` deterministically from its seed."""
        if self._latency:
            await asyncio.sleep(self._latency)
        return self.answer(request)

    def answer(self, request: LLMRequest) -> LLMResponse:
        """The answer ``generate`` gives, drawn in place.

        Raises:
            FatalBackendError: The call is one of the declared failures (``fail_rate``).
        """
        schema = request.json_schema
        if self._fail_rate and uniform(self._salt ^ request.seed, 7919) < self._fail_rate:
            raise FatalBackendError("declared synthetic failure (option fail_rate)")
        # A literal per-replicate seed (as papers report them) is shared by every prompt of the
        # replicate; mixing in the prompt keeps different prompts' draws independent.
        seed = self._salt ^ (
            request.seed ^ zlib.crc32(request.messages[-1]["content"].encode())
            if request.messages
            else request.seed
        )
        if schema is None and request.items:
            text = self._pairs(request, seed)
        elif schema is None:
            # A free-text stage draws whole texts when the study declares some (e.g. accepting
            # and rejecting emails with known rates per group).
            spec = self._fields.get("text")
            text = "synthetic text"
            if spec is not None and (spec.probabilities or spec.default):
                enum = sorted({t for table in self._all_tables(spec) for t in table})
                text = self._draw(
                    "text", {"enum": enum}, dict(request.attributes), uniform(seed, 0)
                )
            elif spec is not None and spec.text:
                text = spec.text
        else:
            attributes = dict(request.attributes)
            answer = {
                name: self._pick(name, prop, request.shown, seed, attributes)
                if prop.get("type") == "array"
                else self._draw(name, prop, attributes, uniform(seed, salt))
                for salt, (name, prop) in enumerate(schema.get("properties", {}).items())
            }
            text = orjson.dumps(answer).decode()
            if request.top_logprobs:
                tokens = self._declared_logprobs(schema, answer, attributes)
                return LLMResponse(text=text, token_logprobs=tokens)
        return LLMResponse(text=text, prompt_tokens=0, completion_tokens=0)

    def _draw(self, name: str, prop: dict[str, Any], attributes: dict[str, str], u: float) -> Any:
        spec = self._fields.get(name)
        if "enum" in prop:
            choices, cumulative = self._choice_table(name, prop, attributes)
            # The first choice whose cumulative edge lies above u (the last when rounding
            # left the total under 1).
            return choices[min(bisect.bisect_right(cumulative, u), len(choices) - 1)]
        kind = prop.get("type")
        if kind in ("integer", "number") and spec is not None and spec.default_mean is not None:
            return _normal(spec, _by_value(spec, attributes), u, kind == "integer")
        if kind == "string":
            text = spec.text if spec is not None and spec.text else f"synthetic {name}"
            return text[: prop["maxLength"]] if "maxLength" in prop else text
        return {"integer": 0, "number": 0.0, "boolean": u < 0.5}.get(kind)

    def choice_table(
        self, name: str, prop: dict[str, Any], attributes: dict[str, str]
    ) -> tuple[list[str], list[float]]:
        """A choice field's options and cumulative declared probabilities for these
        attributes (a unit's shift applied). ``biasim power``'s whole-stage draws read the same
        tables, so both paths draw from one distribution."""
        choices, cumulative = self._choice_table(name, prop, attributes)
        return list(choices), list(cumulative)

    def _choice_table(
        self, name: str, prop: dict[str, Any], attributes: dict[str, str]
    ) -> tuple[list[str], list[float]]:
        """:meth:`choice_table` without copies (the cached lists themselves: read only)."""
        spec = self._fields.get(name)
        value = _by_value(spec, attributes) if spec is not None else None
        key = (name, value, tuple(prop["enum"]))
        if key not in self._tables:
            self._tables[key] = self._table(spec, value, prop["enum"])
        choices, cumulative = self._tables[key]  # type: ignore[misc]
        if spec is not None and spec.unit_sd and spec.unit:
            unit = f"{attributes.get('world', '')}/{attributes.get(spec.unit, '')}"
            cumulative = self._shift(spec, choices, cumulative, unit)
        return choices, cumulative

    def _declared_logprobs(
        self, schema: dict[str, Any], answer: dict[str, Any], attributes: dict[str, str]
    ) -> list[tuple[str, dict[str, float]]] | None:
        """The answer as tokens: the first choice field's value one token whose alternatives
        carry the declared probabilities (what a model's log-probabilities would estimate)."""
        text = orjson.dumps(answer).decode()
        for name, prop in schema.get("properties", {}).items():
            if "enum" not in prop:
                continue
            choices, cumulative = self.choice_table(name, prop, attributes)
            edges = [0.0, *cumulative]
            top = {
                c: math.log(edges[j + 1] - edges[j])
                for j, c in enumerate(choices)
                if edges[j + 1] > edges[j]
            }
            start = value_start(text, name)
            value = orjson.dumps(answer[name]).decode()[1:-1]
            end = start + len(value)
            return [(text[:start], {}), (text[start:end], top), (text[end:], {})]
        return None

    def _pairs(self, request: LLMRequest, seed: int) -> str:
        """A word-pairing answer: one line ``item - name`` per item shown, the target drawn per
        item from the declared ``pairs`` table (keyed by ``item`` and any design value) over the
        targets' values; uniform where nothing is declared."""
        targets = [dict(shown) for shown in request.shown]
        values = [next(v for k, v in t.items() if k != "name") for t in targets]
        attributes = dict(request.attributes)
        lines = []
        for i, item in enumerate(request.items):
            attributes["item"] = item
            if request.picks > 1:
                lines.append(f"{item} - {', '.join(self._pick_targets(request, attributes, seed))}")
                continue
            value = self._draw(
                "pairs", {"enum": sorted(values)}, attributes, uniform(seed, 2000 + i)
            )
            lines.append(f"{item} - {targets[values.index(value)]['name']}")
        return "\n".join(lines)

    def _pick_targets(
        self, request: LLMRequest, attributes: dict[str, str], seed: int
    ) -> list[str]:
        """``request.picks`` of the target names shown for one item, without replacement, each
        weighted by its value's declared ``pairs`` probability (the Gumbel top-k draw); all
        alike where nothing is declared, so the count of a value picked is hypergeometric."""
        targets = [dict(shown) for shown in request.shown]
        values = [next(v for k, v in t.items() if k != "name") for t in targets]
        spec = self._fields.get("pairs")
        choices, cumulative = self._table(
            spec, _by_value(spec, attributes) if spec is not None else None, sorted(set(values))
        )
        edges = [0.0, *cumulative]
        weight = {c: edges[j + 1] - edges[j] for j, c in enumerate(choices)}
        keys = [
            math.log(weight[v]) - math.log(-math.log(1.0 - uniform(seed, 3000 + j)) or 1e-300)
            if weight.get(v, 0.0) > 0
            else -math.inf
            for j, v in enumerate(values)
        ]
        order = sorted(range(len(keys)), key=lambda j: -keys[j])[: request.picks]
        return [targets[j]["name"] for j in order]

    def _pick(
        self,
        name: str,
        prop: dict[str, Any],
        shown: tuple[Any, ...],
        seed: int,
        reader: dict[str, str],
    ) -> list[int]:
        """The labels a reader picks: ``minItems`` of the shown documents without replacement,
        with probability proportional to the declared weights (the Gumbel top-k draw); a
        declared ``in_group`` multiplies the weight of authors who share the ``reader``'s own
        value of ``by``."""
        spec = self._fields.get(name)
        count = int(prop.get("minItems", 1))
        size = int(prop["items"]["maximum"])
        by = spec.by if spec is not None else None
        positions = spec.positions if spec is not None else None
        in_group = spec.in_group if spec is not None else None
        own = reader.get(by) if in_group is not None and isinstance(by, str) else None
        keys = []
        for i in range(size):
            weight = 1.0
            if by and i < len(shown):
                shown_value = next((v for a, v in shown[i] if a == by), "")
                weight *= spec.weights.get(shown_value, 1.0)
                if own is not None and shown_value == own:
                    weight *= in_group
            if positions and i < len(positions):
                weight *= positions[i]
            # 1 - u lies in (0, 1]: the logarithms are finite.
            keys.append(
                math.log(weight) - math.log(-math.log(1.0 - uniform(seed, 1000 + i)) or 1e-300)
            )
        order = sorted(range(size), key=lambda i: -keys[i])
        return [i + 1 for i in order[:count]]

    def _shift(
        self, spec: Any, choices: list[str], cumulative: list[float], unit: str
    ) -> list[float]:
        """The table with the unit's own propensity: the log-odds of ``spec.shifted`` (the
        first choice by default) moved by the unit's N(0, unit_sd) draw, the same draw in every
        call that unit makes (a name liked in one role is liked in all). ``unit`` carries the
        run's seed (``world``): another seed is another draw of every unit's propensity."""
        target = spec.shifted if spec.shifted in choices else choices[0]
        z = statistics.NormalDist().inv_cdf(
            min(max(uniform(zlib.crc32(unit.encode()), self._salt & 0xFFFF), 1e-12), 1 - 1e-12)
        )
        probs = [b - a for a, b in zip([0.0, *cumulative[:-1]], cumulative, strict=True)]
        probs = [
            p * math.exp(z * spec.unit_sd) if c == target else p
            for c, p in zip(choices, probs, strict=True)
        ]
        total, out = sum(probs), []
        running = 0.0
        for p in probs:
            running += p / total
            out.append(running)
        return out

    @staticmethod
    def _all_tables(spec: Any) -> list[dict[str, float]]:
        return [*spec.probabilities.values(), *([spec.default] if spec.default else [])]

    @staticmethod
    def _table(spec: Any, value: str | None, enum: list[str]) -> tuple[list[str], list[float]]:
        probabilities = None
        if spec is not None:
            probabilities = spec.probabilities.get(value) if value is not None else None
            probabilities = probabilities or spec.default
        if not probabilities:
            probabilities = {c: 1.0 / len(enum) for c in enum}
        choices = [c for c in enum if probabilities.get(c, 0.0) > 0]
        cumulative, total = [], 0.0
        for choice in choices:
            total += probabilities[choice]
            cumulative.append(total)
        return choices, cumulative

    async def aclose(self) -> None:
        """Nothing to release."""


def _declared(spec: Any) -> dict[str, Any]:
    """A synthetic table as declared; the later fields only when set, so the identity (and
    every draw) of tables written before they existed stays what it was."""
    dumped = spec.model_dump(mode="json")
    for key in (
        "weights",
        "in_group",
        "positions",
        "unit",
        "unit_sd",
        "shifted",
        "mean",
        "default_mean",
        "sd",
        "bounds",
    ):
        if not dumped.get(key):
            dumped.pop(key, None)
    return dumped


def _normal(spec: Any, value: str | None, u: float, integer: bool) -> float | int:
    """A numeric answer: N(mean for ``value``, sd) at quantile ``u``, rounded for integers and
    clipped to the declared bounds."""
    mean = spec.mean.get(value) if value is not None else None
    mean = spec.default_mean if mean is None else mean
    draw = mean + spec.sd * statistics.NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
    if integer:
        draw = round(draw)
    if spec.bounds is not None:
        draw = min(max(draw, spec.bounds[0]), spec.bounds[1])
    return int(draw) if integer else float(draw)


def _by_value(spec: Any, attributes: dict[str, str]) -> str | None:
    """The value of what selects ``spec``'s probabilities (``a|b`` for a list of keys)."""
    if not spec.by:
        return None
    if isinstance(spec.by, str):
        return attributes.get(spec.by)
    return "|".join(attributes.get(key, "") for key in spec.by)
