"""What a role with ``batch: true`` needs: a backend with a batch API, the chat endpoint, and
(on ``openai``) the transport that uploads batch files. Checked at validate, so ``--batch`` on a
study whose roles cannot batch is refused before a run starts."""

from __future__ import annotations

from biasim.simulator.common.errors import Problem
from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.llm.batch_api import BATCH_BACKENDS
from biasim.simulator.study.casting import cast
from biasim.simulator.study.config import RoleConfig, StudyConfig


def check_batch_roles(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Every problem of the study's roles with ``batch: true`` (per model variant)."""
    problems: list[Problem] = []
    for name, played in cast(config).items():
        for label, role in played.items():
            why = _role_problem(role) if role.batch else None
            if why is not None:
                who = f" (model `{label}`)" if label else ""
                problems.append(smap.problem(("roles", name, "batch"), why + who))
    return problems


def _role_problem(role: RoleConfig) -> str | None:
    if role.backend not in BATCH_BACKENDS:
        return (
            f"the {role.backend} backend has no batch API ({' and '.join(sorted(BATCH_BACKENDS))} "
            "have); set `batch: true` only on the roles that use one"
        )
    if role.endpoint != "chat":
        return "a batch sends chat requests; `endpoint: completions` is answered live only"
    if role.backend == "openai" and role.options.get("transport") == "sdk":
        return "a batch file goes through the default transport; drop `transport: sdk`"
    return None
