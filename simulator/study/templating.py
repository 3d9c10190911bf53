"""Jinja2 templates rendered in a sandbox: a study file from a colleague must never run code."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, UndefinedError, meta, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Macro
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from biasim.analysis.text.redaction import redact_names

#: Longest string or list a template may build (characters or items), and the largest integer
#: argument it may pass to a filter or function (a width, a count).
MAX_TEMPLATE_SIZE = 1_000_000
#: Largest integer a template may compute with ``**`` (in bits).
MAX_POWER_BITS = 4096
# A run of seven digits in a format string is a field width of a million or more.
_HUGE_WIDTH = re.compile(r"\d{7,}")
_FORMATS = frozenset({"format", "format_map"})


class _BoundedCodeGenerator(CodeGenerator):
    """Compiled templates join text only through :func:`_bounded_join`: the rendered output,
    ``a ~ b`` chains, macro bodies and ``{% set %}`` blocks alike."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        super().visit_Template(node, frame)
        # The module's functions look these names up when called, after this line has run.
        self.writeline("concat = str_join = environment.bounded_join")


def _bounded_join(parts: Iterable[Any]) -> str:
    """Join a template's output (or a ``~`` chain), stopping past :data:`MAX_TEMPLATE_SIZE`."""
    out, size = [], 0
    for part in parts:
        text = str(part)
        size += len(text)
        if size > MAX_TEMPLATE_SIZE:
            raise SecurityError(f"a text longer than the template limit of {MAX_TEMPLATE_SIZE:,}")
        out.append(text)
    return "".join(out)


class _BoundedSandbox(SandboxedEnvironment):
    """The sandbox, with the sizes a template can build capped.

    Jinja's sandbox stops code execution, not memory: ``{{ 'a' * 4000000000 }}`` allocates 4 GB
    and ``{{ 7 ** 1000000000 }}`` computes for minutes. Repetition, powers, ``%`` formatting and
    every call (filters, macros, methods) check their operands first, so a template can build at
    most :data:`MAX_TEMPLATE_SIZE` characters or items at a time.
    """

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _BoundedCodeGenerator
    # The whole rendered text is joined here, so a loop printing a long string cannot grow it
    # without bound either.
    concat = staticmethod(_bounded_join)
    bounded_join = staticmethod(_bounded_join)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            _check_power(left, right)
        elif operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        elif operator == "+":
            _check_size(left)
            _check_size(right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # The sandbox hands out str.format wrapped; the string is on the wrapped method.
        receiver = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        formats = isinstance(receiver, str) and getattr(__obj, "__name__", "") in _FORMATS
        if isinstance(receiver, str):
            _check_size(receiver)
            _check_format(receiver)
        for value in (*args, *kwargs.values()):
            # A number being formatted, or handed to a macro (whose own operations are checked),
            # sizes nothing; a width or count handed to a method or function might.
            _check_size(value) if formats or isinstance(__obj, Macro) else _check_argument(value)
        return super().call(__context, __obj, *args, **kwargs)


def _too_big(what: str) -> SecurityError:
    return SecurityError(f"{what} is beyond the template limit of {MAX_TEMPLATE_SIZE:,}")


def _check_size(value: Any) -> None:
    if isinstance(value, str | list | tuple) and len(value) > MAX_TEMPLATE_SIZE:
        raise _too_big(f"a {type(value).__name__} of {len(value):,} items")


def _check_argument(value: Any) -> None:
    _check_size(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_SIZE:
        raise _too_big(f"the argument {value}")


def _check_repeat(seq: Any, times: Any) -> None:
    repeats = isinstance(seq, str | list | tuple) and isinstance(times, int)
    if repeats and len(seq) * times > MAX_TEMPLATE_SIZE:
        raise _too_big(f"repeating {len(seq):,} items {times:,} times")


def _check_power(base: Any, exponent: Any) -> None:
    ints = isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
    if ints and exponent > 0 and exponent * abs(base).bit_length() > MAX_POWER_BITS:
        raise SecurityError(
            f"{base} ** {exponent} is beyond the template limit of {MAX_POWER_BITS} bits"
        )


def _check_format(text: str) -> None:
    if _HUGE_WIDTH.search(text):
        raise SecurityError("a format width of a million or more is beyond the template limit")


def _bounded_filter(func: Any) -> Any:
    """``func`` with its arguments checked like a call's (filters are called directly)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for value in (*args[1:], *kwargs.values()):
            _check_argument(value)
        if args and isinstance(args[0], str) and func.__name__ in ("do_format", "do_center"):
            _check_format(args[0])
        return func(*args, **kwargs)

    return wrapper


#: What rendering a study's template can raise on bad input (reported, never a traceback):
#: an undefined name, a sandbox limit, a wrong type or value, 1/0 or a float overflow, a macro
#: that calls itself forever.
RENDER_ERRORS = (
    UndefinedError,
    SecurityError,
    TypeError,
    ValueError,
    ArithmeticError,
    RecursionError,
)

_ENV = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
# A prompt must be a function of its variables: a random filter would make runs irreproducible
# and the render cache unsound.
del _ENV.filters["random"]
# A namespace carries a value from one loop pass to the next, so `ns.x = ns.x ~ ns.x` could
# double a string past any limit in a few dozen passes; prompts have no use for it.
del _ENV.globals["namespace"]
_ENV.filters.update({name: _bounded_filter(f) for name, f in _ENV.filters.items()})


#: Words that start with a vowel letter but a consonant sound, or the reverse (``an hour``).
_CONSONANT_SOUND = re.compile(r"^(uni|use|usu|uti|eu|one\b|once\b)", re.I)
_SILENT_H = re.compile(r"^(hour|honest|honou?r|heir)", re.I)


def with_article(noun: object) -> str:
    """``noun`` after "a" or "an" by its first sound (``an Engineer``, ``a Hairdresser``,
    ``a University Lecturer``, ``an Hour``): a prompt reading "as a Engineer" is a typo the
    model sees and the paper's prompt does not have."""
    text = str(noun)
    vowel = text[:1].lower() in "aeiou" and not _CONSONANT_SOUND.match(text)
    return f"{'an' if vowel or _SILENT_H.match(text) else 'a'} {text}"


def _redact_name(text: str, name: str | None) -> str:
    return redact_names([text], [name or ""])[0] if name else text


def _email_judge_prompt(email: str) -> str:
    from biasim.analysis.studies.hiring_emails.email_outcomes import JUDGE_PROMPT

    return _ENV.from_string(JUDGE_PROMPT).render(email=email)


# Pure helpers a study may call: `redact_name(text, persona.name)` hides the applicant's name
# (whole word, possessives) before a judge reads an email; `email_judge_prompt(email)` is the
# hiring-outcome judge's prompt, defined once beside the hiring-email classifiers
# (imported on first use: they need scikit-learn).
_ENV.globals.update(redact_name=_redact_name, email_judge_prompt=_email_judge_prompt)
_ENV.filters["with_article"] = with_article


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
