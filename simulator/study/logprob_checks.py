"""What a stage with ``answer: logprobs`` needs: one decision to read, a backend that returns
log-probabilities, and options the model's tokenizer tells apart by their first token."""

from __future__ import annotations

from pathlib import Path

from biasim.simulator.common.errors import Problem
from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.llm.logprobs import first_token_clash
from biasim.simulator.llm.tokens import gguf_counter, tiktoken_counter
from biasim.simulator.study.casting import cast
from biasim.simulator.study.config import RoleConfig, StageConfig, StudyConfig

#: Backends that return log-probabilities (the synthetic one declares them).
LOGPROB_BACKENDS = frozenset({"openai", "local", "synthetic"})


def decision_field(stage: StageConfig) -> tuple[str, list[str]] | None:
    """The one choice field (with fixed choices) a logprobs stage reads, and its options."""
    fields = [
        (name, list(spec.choices))
        for name, spec in (stage.output or {}).items()
        if spec.type == "choice" and spec.choices
    ]
    return fields[0] if len(fields) == 1 else None


def check_logprob_stages(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Every problem of the study's ``answer: logprobs`` stages."""
    problems: list[Problem] = []
    for i, stage in enumerate(config.stages):
        if stage.answer != "logprobs":
            continue
        where = ("stages", i, "answer")
        decision = decision_field(stage)
        if decision is None or stage.completion is not None:
            problems.append(
                smap.problem(
                    where,
                    "`answer: logprobs` reads one decision: the stage needs exactly one `choice` "
                    "field with fixed `choices` (not `choices_from`) and no `completion`",
                )
            )
            continue
        for label, role in cast(config)[stage.role].items():
            why = _role_problem(role, decision[1])
            if why is not None:
                who = f"role `{stage.role}`" + (f" (model `{label}`)" if label else "")
                problems.append(smap.problem(where, f"{who}: {why}"))
    return problems


def _role_problem(role: RoleConfig, options: list[str]) -> str | None:
    if role.backend not in LOGPROB_BACKENDS:
        return (
            f"the {role.backend} backend returns no log-probabilities (use "
            f"{', '.join(sorted(LOGPROB_BACKENDS))})"
        )
    if role.backend == "synthetic":
        return None  # it declares its probabilities
    return first_token_clash(options, _pieces(role))


def _pieces(role: RoleConfig):
    if role.backend == "local":
        raw = role.options.get("model_path")
        if raw:
            path: Path | None = Path(str(raw)).expanduser()
        else:
            from biasim.simulator.llm.local import default_model_path

            path = default_model_path()
        return gguf_counter(path).pieces if path is not None and path.is_file() else None
    return tiktoken_counter(role.model).pieces if role.model else None
