"""Jinja2 templates rendered in a sandbox: a study file from a colleague must never run code."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, meta, nodes
from jinja2.sandbox import SandboxedEnvironment

_ENV = SandboxedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False
)
# A prompt must be a function of its variables: a random filter would make runs irreproducible
# and the render cache unsound.
del _ENV.filters["random"]


def _redact_name(text: str, name: str | None) -> str:
    from biasim.analysis.email_outcomes import redact_names

    return redact_names([text], [name or ""])[0] if name else text


def _email_judge_prompt(email: str) -> str:
    from biasim.analysis.email_outcomes import JUDGE_PROMPT

    return _ENV.from_string(JUDGE_PROMPT).render(email=email)


# Pure helpers a study may call: `redact_name(text, persona.name)` hides the applicant's name
# (whole word, possessives) before a judge reads an email; `email_judge_prompt(email)` is the
# hiring-outcome judge's prompt, defined once in analysis.email_outcomes.
_ENV.globals.update(redact_name=_redact_name, email_judge_prompt=_email_judge_prompt)


@lru_cache(maxsize=4096)
def compile_template(source: str) -> Template:
    """Compile ``source`` once; identical templates share one compiled object.

    Raises:
        jinja2.TemplateSyntaxError: With ``lineno`` relative to the template text.
    """
    return _ENV.from_string(source)


@lru_cache(maxsize=256)
def parse_template(source: str) -> nodes.Template:
    """The template's syntax tree (to tell an author what a failing expression reads)."""
    return _ENV.parse(source)


def render(source: str, context: dict[str, Any]) -> str:
    """Render ``source`` with ``context``; an undefined variable raises ``UndefinedError``."""
    return compile_template(source).render(context)


def template_variables(source: str) -> set[str]:
    """Names ``source`` reads from its context (not those it sets itself).

    Raises:
        jinja2.TemplateSyntaxError: The template does not parse.
    """
    return set(meta.find_undeclared_variables(_ENV.parse(source)))


@lru_cache(maxsize=1024)
def compile_expression(source: str) -> Any:
    """Compile a Jinja expression (a stage's ``when``) once; call the result with a context.

    Raises:
        jinja2.TemplateSyntaxError: The expression does not parse.
    """
    return _ENV.compile_expression(source, undefined_to_none=False)
