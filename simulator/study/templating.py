"""Jinja2 templates rendered in a sandbox: a study file from a colleague must never run code."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from functools import lru_cache
from typing import Any

from jinja2 import (
    StrictUndefined,
    Template,
    TemplateSyntaxError,
    UndefinedError,
    meta,
    nodes,
    pass_context,
)
from jinja2.compiler import CodeGenerator, Frame
from jinja2.lexer import TokenStream
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from biasim.analysis.text.redaction import redact_names
from biasim.registry import PROMPTS
from biasim.simulator.study import registered_prompts
from biasim.simulator.study import template_limits as limits
from biasim.simulator.study.template_limits import MAX_TEMPLATE_SIZE

_FORMATS = frozenset({"format", "format_map"})
_DICT_ATTRIBUTES = frozenset(dir(dict))
#: The filter each loop pass calls first, to count the rendering's steps.
_STEP_FILTER = "_biasim_step"


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
        if type(part) is str:  # most parts: check_size's test of a str, without the call
            if len(part) > MAX_TEMPLATE_SIZE:
                raise limits.too_big(f"a str of {len(part):,} items")
            text = part
        else:
            limits.check_size(part)
            text = str(part)
        size += len(text)
        if size > MAX_TEMPLATE_SIZE:
            raise SecurityError(f"a text longer than the template limit of {MAX_TEMPLATE_SIZE:,}")
        out.append(text)
    return "".join(out)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with the sizes a template can build and the steps it can take capped.

    Jinja's sandbox stops code execution, not memory or time: ``{{ 'a' * 4000000000 }}``
    allocates 4 GB and three nested ``range(999)`` loops run for hours. Repetition, powers,
    formatting and every call (filters, macros, methods) check their operands first (see
    :mod:`template_limits`), loop passes, calls and operators count as steps, and lists cannot
    be changed in place (the immutable sandbox), so a rendering builds at most
    :data:`MAX_TEMPLATE_SIZE` characters or items at a time in at most
    ``MAX_TEMPLATE_STEPS`` steps.
    """

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _BoundedCodeGenerator
    # The whole rendered text is joined here, so a loop printing a long string cannot grow it
    # without bound either.
    concat = staticmethod(_bounded_join)
    bounded_join = staticmethod(_bounded_join)

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        """A template's globals as one plain dict, not Jinja's ``ChainMap`` over the
        environment's: every rendering copies them into its context, and a ``ChainMap`` is
        iterated in Python (10 of a reading's 25 us). The environment's globals are all set
        when this module is imported, before any template is compiled."""
        return {**self.globals, **(d or {})}

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``obj.attribute``, as the sandbox reads it: a plain dict has no attributes beyond
        its type's, so the sandbox's ``getattr`` would fail and fall back to the item. Read
        the item first (``d.text`` of each document a reader sees: an exception saved per
        access)."""
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def _tokenize(
        self, source: str, name: str | None, filename: str | None = None, state: str | None = None
    ) -> TokenStream:
        """Every template and expression is parsed from this stream: its nesting is bounded
        as it is read."""
        stream = super()._tokenize(source, name, filename, state)
        return TokenStream(limits.bounded_nesting(iter(stream)), name, filename)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        _refuse_repeated_keywords(tree, name, filename)
        for loop in tree.find_all(nodes.For):
            step = nodes.Filter(nodes.Const(None), _STEP_FILTER, [], [], None, None)
            loop.body.insert(0, nodes.ExprStmt(step).set_lineno(loop.lineno))
        return tree

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limits.count_step(context)
        if operator == "**":
            limits.check_power(left, right)
        elif operator == "*":
            limits.check_repeat(left, right)
            limits.check_repeat(right, left)
        elif operator == "%" and isinstance(left, str):
            limits.check_format(left, right if isinstance(right, tuple) else (right,))
        elif operator == "+":
            limits.check_size(left)
            limits.check_size(right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        limits.count_step(__context)
        # The sandbox hands out str methods wrapped; the string is on the wrapped method.
        method = getattr(__obj, "__wrapped__", __obj)
        receiver = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        formats = isinstance(receiver, str) and name in _FORMATS
        args = tuple(_materialised(a) for a in args)
        if isinstance(receiver, str):
            limits.check_size(receiver)
            limits.check_text_call(name, receiver, list(args), kwargs)
            if name == "join" and args:
                limits.check_join(receiver, args[0])
        for value in (*args, *kwargs.values()):
            # A number being formatted, or handed to a macro (whose own operations are checked),
            # sizes nothing; a width or count handed to a method or function might.
            if formats or isinstance(__obj, Macro):
                limits.check_size(value)
            else:
                limits.check_argument(value)
        result = super().call(__context, __obj, *args, **kwargs)
        limits.check_size(result, "the result of a call")
        return result


def _refuse_repeated_keywords(tree: nodes.Template, name: str | None, filename: str | None) -> None:
    """Jinja parses ``f(a=1, a=2)``; the Python it compiles to does not, and that error names
    a line of generated code. Refuse it here, at the template's line."""
    for node in tree.find_all((nodes.Call, nodes.Filter, nodes.Test)):
        keys = [k.key for k in node.kwargs]
        if repeated := sorted({k for k in keys if keys.count(k) > 1}):
            raise TemplateSyntaxError(
                f"keyword argument `{repeated[0]}` given twice", node.lineno, name, filename
            )


def _materialised(value: Any) -> Any:
    """A lazy sequence as a list, built within the limit (a finite list is checked as is)."""
    return limits.bounded_list(value) if isinstance(value, Iterator) else value


def _bounded_filter(func: Any) -> Any:
    """``func`` with its arguments and result checked like a call's (filters are called
    directly, not through the sandbox's ``call``)."""
    # Filters that take the context or environment first get their value second.
    first = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = (*args[:first], *(_materialised(a) for a in args[first:]))
        value, rest = (args[first], list(args[first + 1 :])) if len(args) > first else (None, [])
        for item in (*rest, *kwargs.values()):
            limits.check_argument(item)
        if isinstance(value, str):
            limits.check_text_call(func.__name__, value, rest, kwargs)
        if func.__name__ == "do_join":
            limits.check_join(rest[0] if rest else kwargs.get("d", ""), value)
        result = func(*args, **kwargs)
        limits.check_size(result, f"the result of the filter {func.__name__.removeprefix('do_')}")
        return result

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


def _no_lipsum(*_args: Any, **_kwargs: Any) -> str:
    raise SecurityError(
        "lipsum() is not available in a study: its text is random (a prompt must be the same "
        "in every run) and unbounded"
    )


_ENV = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
# A prompt must be a function of its variables: a random filter would make runs irreproducible
# and the render cache unsound.
del _ENV.filters["random"]
# For the same reason, and because `lipsum(n=1000000)` writes text without bound before any
# check sees it, Jinja's random filler text is refused with the reason.
_ENV.globals["lipsum"] = _no_lipsum
# A namespace carries a value from one loop pass to the next, so `ns.x = ns.x ~ ns.x` could
# double a string past any limit in a few dozen passes; prompts have no use for it.
del _ENV.globals["namespace"]
_ENV.filters.update({name: _bounded_filter(f) for name, f in _ENV.filters.items()})
_ENV.filters[_STEP_FILTER] = pass_context(limits.count_step)


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


def _registered_prompt(name: str) -> Callable[..., str]:
    """A template function rendering the prompt registered as ``name`` (``registry.PROMPTS``),
    loaded on its first call; positional arguments fill its declared parameters in order
    (``email_judge_prompt(text)`` fills ``email``), keywords by name."""

    def render(*args: Any, **kwargs: Any) -> str:
        source, variables = registered_prompts.bind(name, args, kwargs)
        # Compiled once: a study renders it for every agent (validate dry-renders them all).
        return compile_template(source).render(**variables)

    return render


# Pure helpers a study may call: `redact_name(text, persona.name)` hides the applicant's name
# (whole word, possessives) before a judge reads an email; each registered prompt (the
# hiring-outcome judge's `email_judge_prompt(email)`, defined once beside the hiring-email
# classifiers) by its name.
_ENV.globals.update(redact_name=_redact_name)
_ENV.filters["with_article"] = _bounded_filter(with_article)
_offered_at = [-1]  # PROMPTS.changes when the prompts were last offered


def _offer_registered_prompts() -> None:
    """Offer every prompt registered so far: a study family registers its prompts when a
    study naming it is loaded, after this module is imported. A template copies the globals
    when it is compiled, so the compiled ones are dropped when the registry changed."""
    if PROMPTS.changes == _offered_at[0]:
        return
    names = PROMPTS.names()  # first: listing them registers the families' prompts
    _offered_at[0] = PROMPTS.changes
    _ENV.globals.update({name: _registered_prompt(name) for name in names})
    _compile.cache_clear()
    _parse.cache_clear()


def compile_template(source: str) -> Template:
    """Compile ``source`` once; identical templates share one compiled object.

    Raises:
        jinja2.TemplateSyntaxError: With ``lineno`` relative to the template text.
    """
    _offer_registered_prompts()
    return _compile(source)


@lru_cache(maxsize=4096)
def _compile(source: str) -> Template:
    return _ENV.from_string(source)


def parse_template(source: str) -> nodes.Template:
    """The template's syntax tree (to tell an author what a failing expression reads)."""
    _offer_registered_prompts()
    return _parse(source)


@lru_cache(maxsize=256)
def _parse(source: str) -> nodes.Template:
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


def reads_answers(expression: str, written_persona: bool) -> bool:
    """Whether a ``when`` expression may read what an earlier stage answered, so its value is
    not known before the run: it names ``outputs``, or ``persona`` where a persona writer
    writes the persona's name and description (``written_persona``)."""
    names = template_variables("{{ " + expression + " }}")
    return "outputs" in names or (written_persona and "persona" in names)


@lru_cache(maxsize=1024)
def compile_expression(source: str) -> Any:
    """Compile a Jinja expression (a stage's ``when``) once; call the result with a context.

    Raises:
        jinja2.TemplateSyntaxError: The expression does not parse.
    """
    return _ENV.compile_expression(source, undefined_to_none=False)
