"""The registered factory of the ``http`` backend: it hands the study's sandbox to the backend.

The backend (:mod:`simulator.llm.http_backend`) renders each request body from a template the
study file writes, so it must render in the same sandbox as every other template of the study
(no code, bounded size and steps). The sandbox lives in this layer, above the LLM layer, so
the registry names this factory, which builds the backend with the sandbox's compiler.
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError

from biasim.simulator.llm.decision_tools import TOOL_INPUTS
from biasim.simulator.llm.egress import Egress
from biasim.simulator.llm.errors import BackendConfigError
from biasim.simulator.llm.http_backend import DEFAULT_BODY, HttpBackend
from biasim.simulator.study.templating import compile_template, template_variables


def _compile_body(source: str) -> Any:
    """The render function of a body template.

    Raises:
        BackendConfigError: It is no valid template, naming ``options.body``.
    """
    try:
        template = compile_template(source)
        unknown = template_variables(source) - set(TOOL_INPUTS) - set(template.environment.globals)
    except TemplateError as exc:
        raise BackendConfigError(f"not a valid template: {exc}", field="options.body") from None
    if unknown:
        raise BackendConfigError(
            f"the body template reads {sorted(unknown)}; it sees only "
            f"{', '.join(TOOL_INPUTS)} (put anything else into the stage's prompt)",
            field="options.body",
        )
    return template.render


class HttpToolBackend(HttpBackend):
    """:class:`HttpBackend` with the study's sandboxed templates."""

    def __init__(self, role: Any) -> None:
        super().__init__(role, _compile_body)

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """As :meth:`HttpBackend.egress`, with the body template compiled (a syntax error is
        found when the study is checked, not at the first call)."""
        body = dict(role.options).get("body", DEFAULT_BODY)
        if not isinstance(body, str):
            raise BackendConfigError("must be a template string", field="options.body")
        _compile_body(body)
        return super().egress(role)
