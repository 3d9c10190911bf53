"""A study family's named prompts reach the templates through the registry (``PROMPTS``), so
generic templating imports no family: the judge prompt renders as before, and a prompt a
plug-in registers renders by its name with its declared parameters filled, positional
arguments in order. A call that does not fill them exactly is refused at validate, located."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biasim.families.hiring_emails.judge_prompt import JUDGE_PROMPT
from biasim.registry import PROMPTS, Prompt
from biasim.simulator.cli import app
from biasim.simulator.study import templating
from biasim.simulator.study.registered_prompts import PromptCallError
from tests.conftest import write_study

#: A plug-in's prompt, registered by its path as a family registers its own. Its first `{{ }}`
#: is a loop variable, its second a global: neither is a parameter.
GREETING = Prompt(
    "{% for n in range(2) %}{{ n }}{% endfor %} {{ redact_name('x', 'x') }} "
    "Hello {{ who }}, from {{ where }}; bye {{ who }}.",
    parameters=("who", "where"),
)
#: A bare template, as the registry took before parameters were declared.
BARE = "Hello {{ who }}"


@pytest.fixture
def greeting() -> Iterator[None]:
    # Registering is enough: templates are offered the registry's prompts when it changes.
    PROMPTS.register("greeting", f"{__name__}:GREETING")
    try:
        yield
    finally:
        PROMPTS.unregister("greeting")
        templating._ENV.globals.pop("greeting", None)
        templating._compile.cache_clear()


def test_the_judge_prompt_renders_through_the_registry() -> None:
    shown = templating.compile_template("{{ email_judge_prompt('Dear [NAME], welcome.') }}")
    text = shown.render()
    assert text == templating.compile_template(JUDGE_PROMPT).render(email="Dear [NAME], welcome.")
    assert "Dear [NAME], welcome." in text and "Labels:" in text


@pytest.mark.usefixtures("greeting")
def test_a_loop_variable_or_global_first_does_not_take_an_argument() -> None:
    render = templating._registered_prompt("greeting")
    assert render("Ada", "London") == "01 [NAME] Hello Ada, from London; bye Ada."
    assert render("Ada", where="Paris") == "01 [NAME] Hello Ada, from Paris; bye Ada."
    assert render(where="Rome", who="Bo") == "01 [NAME] Hello Bo, from Rome; bye Bo."


@pytest.mark.usefixtures("greeting")
@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        (("Ada", "London", "x"), {}, "`greeting(who, where)` takes 2 argument(s); 3 given"),
        (("Ada",), {}, "`greeting(who, where)` is missing `where`"),
        (("Ada", "London"), {"who": "Bo"}, "`greeting(who, where)` got `who` twice"),
        (("Ada",), {"when": "now"}, "`greeting(who, where)` has no parameter `when`"),
    ],
)
def test_bad_arguments_are_refused_with_the_parameters(args, kwargs, why) -> None:
    with pytest.raises(PromptCallError) as info:
        templating._registered_prompt("greeting")(*args, **kwargs)
    assert str(info.value) == why


def test_a_prompt_registered_without_its_parameters_is_refused() -> None:
    PROMPTS.register("bare", f"{__name__}:BARE")
    try:
        with pytest.raises(PromptCallError) as info:
            templating._registered_prompt("bare")("Ada")
        assert "`bare` is a str, not a biasim.registry.Prompt" in str(info.value)
    finally:
        PROMPTS.unregister("bare")


@pytest.mark.parametrize(
    ("call", "why"),
    [
        ("email_judge_prompt(scenario, 'extra')", "takes 1 argument(s); 2 given"),
        ("email_judge_prompt()", "is missing `email`"),
        ("email_judge_prompt(scenario, email=scenario)", "got `email` twice"),
        ("email_judge_prompt(text=scenario)", "has no parameter `text`"),
        ("email_judge_prompt(email=1, email=2)", "keyword argument `email` given twice"),
    ],
)
def test_validate_names_file_line_and_field_of_a_bad_call(
    tmp_path: Path, cli: CliRunner, call: str, why: str
) -> None:
    path = write_study(tmp_path / "s.yaml")
    # In a branch no dry-render takes: the call is read, not only rendered.
    text = path.read_text().replace(
        "      {{ scenario }}", f"      {{% if false %}}{{{{ {call} }}}}{{% endif %}}"
    )
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "email_judge_prompt" in ln)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:{line}: stages[0].prompt: " in result.output
    assert why in result.output and "Traceback" not in result.output
