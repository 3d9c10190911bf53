"""The bounds a study's template renders within: how much it may build and how long it may run.

Every check runs *before* the operation that would allocate: an operation whose result could
pass :data:`MAX_TEMPLATE_SIZE` (``'x' * n``, ``replace``, ``indent``, ``join``, a ``format``
string) is refused from its operands, so a hostile template stops within the memory of an
ordinary ``validate``. Steps (loop passes, calls and operators) are counted per rendering, so
nested loops that build nothing stop too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jinja2 import TemplateSyntaxError
from jinja2.lexer import Token
from jinja2.sandbox import SecurityError

#: Longest string or list a template may build (characters or items, nested lists and mappings
#: counted whole), and the largest integer argument it may pass to a filter or function.
MAX_TEMPLATE_SIZE = 1_000_000
#: Most steps (loop passes, calls, operators) one rendering may take: nested loops that print
#: nothing would otherwise run for hours. A prompt takes tens; this is under a second.
MAX_TEMPLATE_STEPS = 250_000
#: Largest integer a template may compute with ``**`` (in bits).
MAX_POWER_BITS = 4096
#: Deepest a template may nest: brackets and blocks inside one another, plus the operators of
#: one expression. Each level makes Jinja's parser and compiler recurse once more (70 nested
#: brackets exhaust Python's stack), and Python compiles at most 20 nested loops. The built-in
#: studies' templates reach 5.
MAX_TEMPLATE_NESTING = 20
_OPENERS = frozenset({"lparen", "lbracket", "lbrace"})
_CLOSERS = frozenset({"rparen", "rbracket", "rbrace"})
# Operators that nest one node in the next (`a + b + c` is `(a + b) + c`); `~` and comparisons
# make one flat node, so they do not count.
_NESTING_OPERATORS = frozenset(
    {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "pipe", "dot"}
)
_NESTING_WORDS = frozenset({"not", "and", "or", "if", "is"})
_BLOCK_TAGS = frozenset({"for", "if", "macro", "call", "filter", "with", "block", "autoescape"})
# A run of seven digits in a format string is a field width of a million or more.
_HUGE_WIDTH = re.compile(r"\d{7,}")
_SIZED = (str, list, tuple, dict, set, frozenset, range)


def too_big(what: str) -> SecurityError:
    return SecurityError(f"{what} is beyond the template limit of {MAX_TEMPLATE_SIZE:,}")


def size_of(value: Any) -> int:
    """Characters or items in ``value``, nested containers included; counting stops just past
    :data:`MAX_TEMPLATE_SIZE` (a list of a million references to one long string is large)."""
    total, stack = 0, [value]
    while stack and total <= MAX_TEMPLATE_SIZE:
        item = stack.pop()
        if isinstance(item, str | range):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item)
            stack.extend(item)
        else:
            total += 1
    return total


def check_size(value: Any, what: str = "") -> None:
    if type(value) is str:  # the common case, checked without the walk of size_of
        if len(value) > MAX_TEMPLATE_SIZE:
            raise too_big(what or f"a str of {len(value):,} items")
        return
    if isinstance(value, _SIZED) and (size := size_of(value)) > MAX_TEMPLATE_SIZE:
        raise too_big(what or f"a {type(value).__name__} of {size:,} items")


def check_argument(value: Any) -> None:
    check_size(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_SIZE:
        raise too_big(f"the argument {value}")


def check_result_bound(bound: int, what: str) -> None:
    """Refuse an operation whose result would be ``bound`` characters or items."""
    if bound > MAX_TEMPLATE_SIZE:
        raise too_big(f"{what} (up to {bound:,} characters)")


def check_repeat(seq: Any, times: Any) -> None:
    if isinstance(seq, _SIZED) and isinstance(times, int) and times > 0:
        size = size_of(seq)
        check_result_bound(size * times, f"repeating {size:,} items {times:,} times")


def check_power(base: Any, exponent: Any) -> None:
    ints = isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
    if ints and exponent > 0 and exponent * abs(base).bit_length() > MAX_POWER_BITS:
        raise SecurityError(
            f"{base} ** {exponent} is beyond the template limit of {MAX_POWER_BITS} bits"
        )


def check_format(text: str, args: Any = ()) -> None:
    """A format string: no huge width, and no field repeated over long arguments."""
    if _HUGE_WIDTH.search(text):
        raise SecurityError("a format width of a million or more is beyond the template limit")
    fields = text.count("{") + text.count("%")
    longest = max((size_of(a) for a in args), default=0)
    check_result_bound(len(text) + fields * longest, "formatting")


def bounded_nesting(tokens: Iterator[Token]) -> Iterator[Token]:
    """The template's tokens, stopping with a syntax error once it nests deeper than
    :data:`MAX_TEMPLATE_NESTING`: counted as the tokens are read, before the parser descends
    (it recurses once per level, and would end in a ``RecursionError``)."""
    blocks = brackets = operators = 0
    tag: str | None = None  # the current block tag's name (`for`, `endfor`, `set`, ...)
    assigns = False
    for token in tokens:
        kind = token.type
        if kind in ("block_begin", "variable_begin"):
            operators, tag, assigns = 0, "" if kind == "block_begin" else None, False
        elif kind == "block_end":
            blocks += _block_change(tag, assigns)
        elif kind == "name" and tag == "":
            tag = token.value
        elif kind in _OPENERS:
            brackets += 1
        elif kind in _CLOSERS:
            brackets -= 1
        elif kind == "assign":
            assigns = True
        elif kind in _NESTING_OPERATORS or (kind == "name" and token.value in _NESTING_WORDS):
            operators += 1
        if blocks + brackets + operators > MAX_TEMPLATE_NESTING:
            raise TemplateSyntaxError(
                f"the template nests more than {MAX_TEMPLATE_NESTING} levels deep (brackets and "
                "blocks inside one another, with the operators of one expression), beyond the "
                "template limit",
                token.lineno,
            )
        yield token


def _block_change(tag: str | None, assigns: bool) -> int:
    """How a block tag changes the block depth: +1 opens (`{% set x %}` too, but not
    `{% set x = 1 %}`), -1 closes."""
    if tag in _BLOCK_TAGS or (tag == "set" and not assigns):
        return 1
    return -1 if tag is not None and tag.startswith("end") else 0


def count_step(context: Any, _value: Any = None) -> None:
    """One more step of this rendering (the count lives on the rendering's own context); also
    the filter each loop pass calls, whose value is ignored."""
    steps = getattr(context, "_biasim_steps", 0) + 1
    if steps > MAX_TEMPLATE_STEPS:
        raise SecurityError(
            f"the template takes more than {MAX_TEMPLATE_STEPS:,} steps (loop passes, calls, "
            "operators) in one rendering, beyond the template limit"
        )
    context._biasim_steps = steps


def bounded_list(items: Iterator[Any]) -> list[Any]:
    """Materialise a lazy sequence (a ``map`` or ``select``), stopping once it grows too big."""
    out, size = [], 0
    for item in items:
        size += 1 + size_of(item)
        if size > MAX_TEMPLATE_SIZE:
            raise too_big("a sequence of more items")
        out.append(item)
    return out


def _text_growth(name: str, text: str, args: list[Any], kwargs: dict[str, Any]) -> int | None:
    """Upper bound on the length of ``text.<name>(*args)`` (or its filter), where it can grow."""
    if name in ("replace", "do_replace") and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        hits = text.count(old) if old else len(text) + 1
        return len(text) + hits * max(0, len(new) - len(old))
    if name == "do_indent":
        width = args[0] if args else kwargs.get("width", 4)
        step = len(width) if isinstance(width, str) else int(width)
        return len(text) + (text.count("\n") + 1) * step
    if name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        return len(text) + text.count("\t") * int(tab)
    if name == "do_wordwrap":
        width = args[0] if args else kwargs.get("width", 79)
        wrap = args[2] if len(args) > 2 else kwargs.get("wrapstring") or "\n"
        breaks = len(text) // max(int(width), 1) + text.count("\n") + 1
        return len(text) + breaks * len(str(wrap))
    return None


def check_text_call(name: str, text: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse a string method or filter whose result could pass the limit."""
    bound = _text_growth(name, text, args, kwargs)
    if bound is not None:
        check_result_bound(bound, f"{name.removeprefix('do_')} on a text of {len(text):,}")
    if name in ("format", "format_map", "do_format"):
        check_format(text, [*args, *kwargs.values()])


def check_join(separator: Any, items: Any) -> None:
    if isinstance(items, list | tuple):
        bound = size_of(items) + len(str(separator)) * len(items)
        check_result_bound(bound, f"joining {len(items):,} items")
