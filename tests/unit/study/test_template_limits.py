"""The template sandbox refuses, before allocating, any operation whose result could pass the
size limit, and stops a rendering after its step limit; ordinary prompts render unchanged."""

from __future__ import annotations

import time

import pytest
from jinja2 import TemplateSyntaxError, UndefinedError
from jinja2.sandbox import SecurityError

from biasim.simulator.study.template_limits import (
    MAX_TEMPLATE_NESTING,
    MAX_TEMPLATE_SIZE,
    MAX_TEMPLATE_STEPS,
)
from biasim.simulator.study.templating import compile_expression, compile_template, render

LOOPS = (
    "{% for a in range(999) %}{% for b in range(999) %}{% for c in range(999) %}"
    "{% endfor %}{% endfor %}{% endfor %}"
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (LOOPS, f"more than {MAX_TEMPLATE_STEPS:,} steps"),
        ("{{ ('x' * 999999) | replace('x', 'x' * 999999) }}", "replace on a text of 999,999"),
        ("{{ ('x' * 900000) | replace('x', 'xx') }}", "up to 1,800,000 characters"),
        ("{{ ('x' * 999999).replace('x', 'x' * 999999) }}", "replace on a text of 999,999"),
        ("{{ ('x\\n' * 400000) | indent(999999) }}", "indent on a text of 800,000"),
        ("{{ ('\\t' * 999999).expandtabs(999999) }}", "expandtabs on a text"),
        ("{{ ('x' * 999999) | wordwrap(1, wrapstring='y' * 999) }}", "wordwrap on a text"),
        ("{{ ((['x' * 99999] * 2) * 99) | join }}", "repeating 200,000 items 99 times"),
        (
            "{{ ['x' * 600000, 'y' * 600000] | join }}",
            "joining 2 items (up to 1,200,002 characters)",
        ),
        ("{{ ('{0}' * 300000).format('x' * 999999) }}", "formatting"),
        ("{{ ('%s' * 3) % ('x' * 999999, 'y', 'z') }}", "formatting"),
        ("{{ range(99999) | map('center', 999999) | list | length }}", "a sequence of more"),
        ("{{ range(99999) | map('center', 999999) | join }}", "a sequence of more"),
    ],
)
def test_each_growing_operation_is_refused_before_it_allocates(source: str, expected: str) -> None:
    started = time.monotonic()
    with pytest.raises(SecurityError) as refused:
        render(source, {})
    assert expected in str(refused.value)
    assert f"{MAX_TEMPLATE_SIZE:,}" in str(refused.value) or "steps" in str(refused.value)
    assert time.monotonic() - started < 30  # a safety bound: these stop in well under a second


def test_lists_cannot_grow_in_place() -> None:
    # The immutable sandbox: a list grown by append in a loop would dodge the size checks.
    with pytest.raises(SecurityError):
        render("{% set l = [] %}{% for i in range(3) %}{{ l.append(i) }}{% endfor %}", {})


def test_the_step_count_is_per_rendering() -> None:
    # 400 x 400 inner passes plus 400 outer: 160,400 steps, under the limit once, not twice.
    source = "{% for i in range(400) %}{% for j in range(400) %}{% endfor %}{% endfor %}done"
    assert render(source, {}) == "done"
    assert render(source, {}) == "done"  # a second rendering starts from zero


def test_ordinary_prompts_render_as_before() -> None:
    source = (
        "{% for t in traits %}{{ loop.index }}. {{ t | upper }}\n{% endfor %}"
        "{{ 'a,b'.split(',') | join('-') }} {{ '%s is %d' % ('x', 3) }} "
        "{{ '{} {}'.format('a', 'b') }} {{ text | indent(2) | replace('a', 'b') }} "
        "{{ ('word ' * 40) | wordwrap(30) | length }} {{ traits | map('title') | join(', ') }}"
    )
    out = render(source, {"traits": ["kind", "smart"], "text": "a line\nanother a"})
    assert out == ("1. KIND\n2. SMART\na-b x is 3 a b b line\n  bnother b 199 Kind, Smart")


def test_a_dict_reads_as_the_sandbox_reads_it() -> None:
    # The item is read first only where the sandbox would fall back to it: a dict's own
    # methods still win over a key of the same name, and a missing key is undefined.
    document = {"label": 1, "text": "t", "keys": "a key"}
    assert render("{{ d.label }}: {{ d.text }}", {"d": document}) == "1: t"
    assert render("{{ d.keys() | list | length }}", {"d": document}) == "3"
    assert render("{{ d['keys'] }}", {"d": document}) == "a key"
    with pytest.raises(UndefinedError):
        render("{{ d.missing }}", {"d": document})
    with pytest.raises(SecurityError):
        render("{{ d.__class__.__subclasses__() }}", {"d": document})


def test_the_environment_globals_reach_every_template() -> None:
    # A template's globals are one dict of the environment's: present, and a context variable
    # of the same name wins, as with Jinja's own chain of globals.
    assert render("{{ range(3) | list }}", {}) == "[0, 1, 2]"
    assert "Ann" not in render("{{ redact_name('Ann wrote', 'Ann') }}", {})
    assert render("{{ range }}", {"range": "a variable"}) == "a variable"


def test_a_long_text_part_is_refused_by_size() -> None:
    # One part longer than the limit, handed in by the context: refused at the join.
    with pytest.raises(SecurityError, match="a str of 1,000,001 items"):
        render("{{ text }}", {"text": "x" * (MAX_TEMPLATE_SIZE + 1)})


#: Each way a template nests (brackets, blocks, operators that make one node of the next), as a
#: template nested ``n`` deep; each one's depth counts one per level.
NESTINGS = {
    "brackets": lambda n: "{{ " + "(" * n + "1" + ")" * n + " }}",
    "lists": lambda n: "{{ " + "[" * n + "]" * n + " }}",
    "mappings": lambda n: "{{ " + "{'a': " * n + "1" + "}" * n + " }}",
    "negations": lambda n: "{{ " + "not " * n + "1 }}",
    "sums": lambda n: "{{ " + " + ".join(["1"] * (n + 1)) + " }}",
    "filters": lambda n: "{{ 'a'" + " | upper" * n + " }}",
    "attributes": lambda n: "{{ x" + ".a" * n + " }}",
    "conditions": lambda n: "{{ " + "1 if x else " * n + "1 }}",
    "ifs": lambda n: "{% if 1 %}" * n + "x" + "{% endif %}" * n,
    "loops": lambda n: "{% for i in [1] %}" * n + "x" + "{% endfor %}" * n,
    "set blocks": lambda n: "{% set a %}" * n + "x" + "{% endset %}" * n,
}


@pytest.mark.parametrize("nesting", NESTINGS.values(), ids=NESTINGS)
def test_nesting_past_the_limit_is_a_syntax_error_before_parsing(nesting) -> None:
    # 20,000 levels: the parser would end in a RecursionError; the token count stops it first.
    with pytest.raises(TemplateSyntaxError, match=f"more than {MAX_TEMPLATE_NESTING} levels"):
        compile_template(nesting(20_000))
    with pytest.raises(TemplateSyntaxError, match="levels deep"):
        compile_template(nesting(MAX_TEMPLATE_NESTING + 1))


@pytest.mark.parametrize("nesting", NESTINGS.values(), ids=NESTINGS)
def test_nesting_at_the_limit_compiles_deep_in_the_stack(nesting) -> None:
    # The limit must leave room for the parser and compiler however deep the caller's stack
    # is (the command line under pytest is some 150 frames): build it 300 frames down.
    def nested(depth: int):
        return nested(depth - 1) if depth else compile_template(nesting(MAX_TEMPLATE_NESTING))

    assert nested(300) is not None


def test_a_when_expression_is_bounded_too() -> None:
    with pytest.raises(TemplateSyntaxError, match="levels deep"):
        compile_expression("(" * 20_000 + "1" + ")" * 20_000)


def test_lipsum_is_refused_with_the_reason() -> None:
    # Random text (a prompt must be the same in every run) of unbounded length.
    started = time.monotonic()
    with pytest.raises(SecurityError, match="lipsum\\(\\) is not available in a study: its text"):
        render("{{ lipsum(n=1000000) }}", {})
    assert time.monotonic() - started < 5
