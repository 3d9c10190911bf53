"""What a study will cost and how long it will take, before a single request (``biasim
estimate``, and the summary line of ``biasim validate``).

Per stage, role and model: the calls (a stage with a ``when``, or a reading stage of a pipeline,
at its upper bound), the prompt tokens of the study's own rendered prompts counted with the
model's tokenizer where one is at hand, the output tokens at ``max_tokens`` (an upper bound) or
as measured by a pilot, the price from the shipped table or the study's, the time at the role's
concurrency and rate limits, and the answers already in a run's call store subtracted.
"""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from biasim.registry import BACKENDS
from biasim.simulator.llm.pricing import PRICES_DATE, Price
from biasim.simulator.llm.structured import OutputSchema, canonical_json, reading_schema
from biasim.simulator.llm.tokens import (
    TokenCounter,
    approximate,
    chat_tokens,
    gguf_counter,
    tiktoken_counter,
)
from biasim.simulator.study.checks import DOCUMENT_STAND_IN, dry_render
from biasim.simulator.study.config import RoleConfig, StageConfig, Study, StudyConfig
from biasim.simulator.study.design import expected_stage_units, other_applicants, when_counts
from biasim.simulator.study.prices import role_price
from biasim.simulator.study.stage_graph import calls_per_agent
from biasim.simulator.study.views import StudyViews, study_views

#: Output tokens assumed for a role without ``max_tokens``.
UNCAPPED_OUTPUT = 1024


@dataclass(frozen=True)
class Speed:
    """Assumed speed of a backend's calls when no pilot measured it."""

    overhead_s: float
    prompt_per_s: float
    output_per_s: float

    def seconds(self, prompt: float, output: float) -> float:
        return self.overhead_s + prompt / self.prompt_per_s + output / self.output_per_s


#: A hosted API; a model in this process on a laptop CPU; the synthetic responder.
SERVER_SPEED = Speed(0.5, 5000.0, 60.0)
ASSUMED_SPEED = {"local": Speed(0.0, 200.0, 15.0), "synthetic": Speed(0.0005, 1e9, 1e9)}


@dataclass
class Line:
    """One stage's calls to one model."""

    stage: str
    role: str
    label: str
    backend: str
    model: str
    calls: int
    upper_bound: bool
    prompt_tokens: float
    output_tokens: float
    price: Price | None
    seconds_per_call: float
    concurrency: int
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    cached: int = 0
    #: Tokens and time measured by ``--pilot`` calls rather than assumed.
    piloted: bool = False
    #: The role sends these calls through its provider's batch API (``batch: true``/``--batch``).
    batched: bool = False

    @property
    def new_calls(self) -> int:
        return max(self.calls - self.cached, 0)

    def cost(self, batch: bool = False) -> float | None:
        """USD for the new calls; ``None`` without a (batch) price."""
        if self.price is None or (batch and self.price.batch_input is None):
            return None
        n = self.new_calls
        return self.price.cost(n * self.prompt_tokens, n * self.output_tokens, batch=batch)

    @property
    def seconds(self) -> float:
        """Wall time of the new calls at the concurrency bound and the rate limits."""
        per_s = self.concurrency / max(self.seconds_per_call, 1e-9)
        if self.requests_per_minute:
            per_s = min(per_s, self.requests_per_minute / 60)
        if self.tokens_per_minute:
            per_s = min(per_s, self.tokens_per_minute / 60 / (self.prompt_tokens + 1))
        return self.new_calls / per_s


@dataclass
class Estimate:
    """A study's lines and what the figures rest on."""

    study: str
    lines: list[Line]
    notes: list[str] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(line.new_calls for line in self.lines)

    @property
    def cached(self) -> int:
        return sum(min(line.cached, line.calls) for line in self.lines)

    def tokens(self) -> tuple[float, float]:
        """Prompt and output tokens of the new calls."""
        return (
            sum(line.new_calls * line.prompt_tokens for line in self.lines),
            sum(line.new_calls * line.output_tokens for line in self.lines),
        )

    def cost(self, batch: bool = False) -> float | None:
        costs = [line.cost(batch) for line in self.lines if line.new_calls]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)

    def configured_cost(self) -> float | None:
        """USD as the study sends its calls: batched roles at the batch price, the rest live."""
        costs = [line.cost(line.batched) for line in self.lines if line.new_calls]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)

    @property
    def seconds(self) -> float:
        """Stages run one after another; the models of one stage side by side."""
        by_stage: dict[str, float] = {}
        for line in self.lines:
            by_stage[line.stage] = max(by_stage.get(line.stage, 0.0), line.seconds)
        return sum(by_stage.values())

    @property
    def upper_bound(self) -> bool:
        return any(line.upper_bound for line in self.lines)


def estimate(study: Study, store: Path | None = None, tokenizers: bool = True) -> Estimate:
    """The figures of ``study`` (sends nothing).

    Args:
        study: The validated study.
        store: A run directory (or its ``calls.sqlite``) whose answers are not asked again.
        tokenizers: Count tokens with each model's own tokenizer where one is at hand
            (loading one takes seconds); ``False`` approximates every count.
    """
    config = study.config
    views = study_views(config)
    texts = _rendered_texts(study)
    counted = when_counts(config)
    counts = _stage_calls(config, views, counted.agents)
    counters: dict[tuple[str, ...], TokenCounter] = {}
    if not tokenizers:
        counters = _ApproximateCounters()
    lines: list[Line] = []
    unrendered: list[str] = []
    for index, stage in enumerate(config.stages):
        if stage.name not in texts.get("seen", {}) and counts[stage.name][1]:
            # `when` false for every agent of the dry render, which varies one factor at a
            # time: a stage it never reached is asked of no one, unless the design's count
            # says otherwise (then its prompt is not measured).
            counts[stage.name] = (0, False)
        elif stage.name not in texts.get("seen", {}) and counts[stage.name][0]:
            unrendered.append(stage.name)
        for label, variant in views.casting[stage.role].items():
            calls, bound = counts[stage.name]
            counter = _counter(variant, counters)
            completion = not variant.structured_output and stage.completion is not None
            parts = ("completion",) if completion else ("system", "prompt")
            messages = [_mean_text(texts, index, part) for part in parts]
            prompt = chat_tokens(counter, [m for m in messages if m])
            prompt += _documents_read(stage, label, messages, counter, lines)
            schema = None if completion or _choices_from(stage) else _sent_schema(stage, messages)
            if schema is not None:
                prompt += counter.count(canonical_json(schema.json_schema))
            if label != "" and not bound and stage.name in counted.by_label:
                per_label = counted.by_label[stage.name].get(label, 0)
            else:
                per_label = calls if label == "" else calls // max(len(views.model_labels), 1)
            lines.append(_line(stage, stage.role, label, variant, per_label, bound, prompt, config))
            if completion:
                assert stage.completion is not None
                fmt = views.casting[stage.completion.formatter]
                fmt_role = fmt.get(label) or fmt[""]
                fmt_counter = _counter(fmt_role, counters)
                extract = chat_tokens(fmt_counter, [_mean_text(texts, index, "extract")])
                extract += lines[-1].output_tokens
                lines.append(
                    _line(
                        stage,
                        stage.completion.formatter,
                        label,
                        fmt_role,
                        per_label,
                        bound,
                        extract,
                        config,
                    )
                )
    if store is not None:
        _subtract_store(lines, store)
    notes = _notes(lines, counters)
    if any(stage.reads is not None for stage in config.stages):
        notes.append(
            "prompt tokens of a reading stage include the documents a reading shows, each as "
            "long as its writing stage's output tokens above"
        )
    if unrendered:
        notes.append(
            f"prompt tokens of {', '.join(unrendered)} not measured: validation renders one "
            "factor level at a time and reached no agent its `when` selects"
        )
    return Estimate(config.name, lines, notes)


def _documents_read(
    stage: StageConfig,
    label: str,
    messages: list[str],
    counter: TokenCounter,
    lines: list[Line],
) -> float:
    """What a reading stage's prompt gains from the documents it shows: the rendered prompt
    holds a stand-in for each (validation renders before anything is written); the run sends
    the document, as long as its writing stage's output (that stage's line, the same figure
    this estimate takes for it: ``max_tokens``, an upper bound, or a pilot's measure)."""
    if stage.reads is None:
        return 0.0
    writers = [line for line in lines if line.stage == stage.reads.stage]
    writer = next((line for line in writers if line.label == label), None)
    writer = writer or (writers[0] if writers else None)
    if writer is None:
        return 0.0
    stand_ins = [s for m in messages for s in DOCUMENT_STAND_IN.findall(m)]
    return sum(writer.output_tokens - counter.count(s) for s in stand_ins)


def _sent_schema(stage: StageConfig, messages: list[str]) -> OutputSchema | None:
    """The answer schema the stage's agents send (as the agents build it): its output fields,
    and for a reading that picks (``select``, or one of a pair) the labels of the documents
    its prompt shows."""
    reads = stage.reads
    picks = (stage.select or (1 if reads.matching == "pair" else 0)) if reads else 0
    if not stage.output and not picks:
        return None
    shown = sum(len(DOCUMENT_STAND_IN.findall(m)) for m in messages)
    return reading_schema(stage.output or {}, picks, max(shown, 1), forced=stage.forced_choice)


def _choices_from(stage: StageConfig) -> bool:
    # Choices rendered per agent: the schema differs by call (and is small), left out.
    return any(f.choices_from for f in (stage.output or {}).values())


def _line(
    stage: StageConfig,
    role: str,
    label: str,
    variant: RoleConfig,
    calls: int,
    bound: bool,
    prompt: float,
    config: StudyConfig,
) -> Line:
    output = float(variant.max_tokens or UNCAPPED_OUTPUT)
    speed = ASSUMED_SPEED.get(variant.backend, SERVER_SPEED)
    default = getattr(_backend_class(variant.backend), "default_concurrency", 1)
    return Line(
        stage=stage.name,
        role=role,
        label=label,
        backend=variant.backend,
        model=variant.model or _default_model(variant),
        calls=calls,
        upper_bound=bound,
        prompt_tokens=float(prompt),
        output_tokens=output,
        price=role_price(config, variant),
        seconds_per_call=speed.seconds(prompt, output),
        concurrency=variant.max_concurrency or int(default),
        requests_per_minute=variant.requests_per_minute,
        tokens_per_minute=variant.tokens_per_minute,
        batched=variant.batch,
    )


def _backend_class(name: str) -> object:
    try:
        return BACKENDS.load(name)
    except Exception:  # an extra not installed: the estimate still stands, at one call a time
        return object()


def _default_model(variant: RoleConfig) -> str:
    if variant.backend == "local":
        path = _model_path(variant)
        return path.stem if path else "local"
    if variant.backend == "synthetic":
        from biasim.simulator.llm.synthetic import DEFAULT_MODEL

        return DEFAULT_MODEL
    return variant.backend


def _model_path(variant: RoleConfig) -> Path | None:
    raw = variant.options.get("model_path")
    if raw:
        return Path(str(raw)).expanduser()
    try:
        from biasim.simulator.llm.local import default_model_path
    except ImportError:
        return None
    return default_model_path()


class _ApproximateCounters(dict):
    """A counter cache that holds the approximation for every model."""

    def __missing__(self, key: tuple[str, ...]) -> TokenCounter:
        self[key] = approximate("tokenizers not loaded")
        return self[key]

    def __contains__(self, key: object) -> bool:
        return True


def _counter(variant: RoleConfig, cache: dict[tuple[str, ...], TokenCounter]) -> TokenCounter:
    """The model's tokenizer where one is at hand, else the approximation (cached per model)."""
    key = (variant.backend, variant.model or "", str(variant.options.get("model_path", "")))
    if key not in cache:
        if variant.backend == "local":
            path = _model_path(variant)
            cache[key] = gguf_counter(path) if path else approximate("no model file")
        elif variant.backend in {"openai", "langchain"} and variant.model:
            cache[key] = tiktoken_counter(variant.model)
        else:
            cache[key] = approximate(f"no tokenizer for the {variant.backend} backend")
    return cache[key]


def _rendered_texts(study: Study) -> dict[str, dict]:
    """Every text the dry render sends, by (stage index, part); ``seen``: stages it reached."""
    texts: dict[tuple[int, str], list[str]] = {}
    seen: dict[str, bool] = {}

    def keep(path: tuple, text: str, agent: object) -> None:
        if path[0] != "stages":
            return
        part = str(path[-1]) if path[2] == "completion" else str(path[2])
        texts.setdefault((int(path[1]), part), []).append(text)
        seen[study.config.stages[int(path[1])].name] = True

    if study.rendered is None:
        dry_render(study, keep)
    else:
        for path, text in study.rendered:
            keep(path, text, None)
    return {"texts": texts, "seen": seen}  # type: ignore[dict-item]


def rendered_messages(study: Study) -> dict[str, list[tuple[dict[str, str], ...]]]:
    """Per stage, the chat messages of each agent of the dry render (system, then prompt)."""
    texts = _rendered_texts(study)["texts"]
    out: dict[str, list[tuple[dict[str, str], ...]]] = {}
    for index, stage in enumerate(study.config.stages):
        prompts = texts.get((index, "prompt"), [])
        systems = texts.get((index, "system"), [])
        out[stage.name] = [
            (
                *([{"role": "system", "content": systems[i % len(systems)]}] if systems else []),
                {"role": "user", "content": prompt},
            )
            for i, prompt in enumerate(dict.fromkeys(prompts))
        ]
    return out


def _mean_text(texts: dict, index: int, part: str) -> str:
    """A text of the mean length of the stage's rendered ``part`` (empty when it has none)."""
    found: list[str] = texts["texts"].get((index, part), [])
    if not found:
        return ""
    length = round(statistics.fmean(len(t) for t in found))
    # The text nearest the mean length stands for them all (counted by the real tokenizer).
    return min(found, key=lambda t: abs(len(t) - length))


def _stage_calls(
    config: StudyConfig, views: StudyViews, counted: dict[str, int]
) -> dict[str, tuple[int, bool]]:
    """Per stage: its calls over every model, and whether that is only an upper bound."""
    if views.pipeline:
        units = expected_stage_units(config)
        market, others = config.market, other_applicants(config)
        bounded = set()
        for stage in config.stages if market is not None and others else ():
            if stage.reads is None and stage.population == market.applicants.population:
                # Applicants only another trajectory draws write letters too (a bound).
                units[stage.name] += others
                bounded.add(stage.name)
        return {
            s.name: (
                units[s.name] * calls_per_agent(config, s),
                s.reads is not None or s.when is not None or s.name in bounded,
            )
            for s in config.stages
        }
    agents = views.agents_total
    labels = len(views.model_labels)
    out: dict[str, tuple[int, bool]] = {}
    for stage in config.stages:
        calls = agents
        for factor in stage.shared_across:
            calls //= max(len(config.design.factors.get(factor, {})), 1)
        asked_once = labels > 1 and "" in views.casting[stage.role]
        if asked_once:
            calls //= labels  # one model plays the role for every label: asked once
        twins = calls_per_agent(config, stage)
        if stage.name in counted and not stage.shared_across and not asked_once:
            # Its `when` reads no answer: the agents it selects are counted, not bounded.
            out[stage.name] = (counted[stage.name] * twins, False)
        else:
            out[stage.name] = (calls * twins, stage.when is not None)
    return out


def _subtract_store(lines: list[Line], store: Path) -> None:
    path = store / "calls.sqlite" if store.is_dir() else store
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT stage, role, backend, model, COUNT(DISTINCT key) FROM calls WHERE "
            "status != 'error' AND reask = 0 GROUP BY stage, role, backend, model"
        ).fetchall()
    hits = {tuple(row[:4]): n for *row, n in rows}
    for line in lines:
        key = (line.stage, line.role, line.backend, line.model)
        line.cached = min(hits.get(key, 0), line.calls)


def _notes(lines: Iterable[Line], counters: dict[tuple[str, ...], TokenCounter]) -> list[str]:
    notes = ["prompt tokens: " + "; ".join(sorted({c.method for c in counters.values()}))]
    notes.append(
        "output tokens: each role's max_tokens, an upper bound (structured answers are "
        f"shorter; a role without max_tokens is taken at {UNCAPPED_OUTPUT})"
    )
    sources = {}
    for line in lines:
        if line.price is None:
            sources[line.model] = "no price known: add it under `prices:` or with --prices"
        else:
            p = line.price
            batch = (
                f", batch ${p.batch_input:g}/${p.batch_output:g}"
                if p.batch_input is not None
                else ", no batch price"
            )
            live = f"${p.input:g}/${p.output:g} per million in/out"
            sources[line.model] = f"{live}{batch} ({p.source})"
    notes += [f"price of {model}: {text}" for model, text in sources.items()]
    notes.append(
        "time: at each role's max_concurrency and rate limits, assuming "
        f"{SERVER_SPEED.output_per_s:g} output tokens/s and {SERVER_SPEED.overhead_s:g} s a "
        f"call on a server, {ASSUMED_SPEED['local'].output_per_s:g} tokens/s in process; "
        "stages in turn, the models of a stage side by side"
    )
    notes.append(
        "re-asks after invalid answers are not counted; stages marked <= run only for the "
        "agents their `when` or a reading selects, and a market's letters for the applicants "
        "only another trajectory than the base draws (the count is the upper bound); prices of "
        f"{PRICES_DATE} unless the study gives its own"
    )
    return notes
