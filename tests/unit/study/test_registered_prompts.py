"""A study family's named prompts reach the templates through the registry (``PROMPTS``), so
generic templating imports no family: the judge prompt renders as before, and a prompt a
plug-in registers renders by its name with its variables filled in order."""

from __future__ import annotations

from biasim.families.hiring_emails.judge_prompt import JUDGE_PROMPT
from biasim.registry import PROMPTS
from biasim.simulator.study import templating

#: A plug-in's prompt, registered by its path as a family registers its own.
GREETING = "Hello {{ who }}, from {{ where }}; bye {{ who }}."


def test_the_judge_prompt_renders_through_the_registry() -> None:
    shown = templating.compile_template("{{ email_judge_prompt('Dear [NAME], welcome.') }}")
    text = shown.render()
    assert text == templating.compile_template(JUDGE_PROMPT).render(email="Dear [NAME], welcome.")
    assert "Dear [NAME], welcome." in text and "Labels:" in text


def test_a_registered_prompt_fills_its_variables_in_order() -> None:
    PROMPTS.register("greeting", f"{__name__}:GREETING")
    try:
        render = templating._registered_prompt("greeting")
        assert render("Ada", "London") == "Hello Ada, from London; bye Ada."
        assert render("Ada", where="Paris") == "Hello Ada, from Paris; bye Ada."
    finally:
        PROMPTS.unregister("greeting")
