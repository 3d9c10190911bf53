"""The part of ``report.html`` that shows what was asked and what came back: per stage, the
rendered prompt of each distinct template (as ``biasim validate --show-prompts`` shows them,
recorded in the manifest) and a few sample answers per group (from the summary)."""

from __future__ import annotations

import html
from typing import Any

from biasim.simulator.common.html import HtmlSection


def prompts_section(manifest: dict[str, Any], summary: dict[str, Any]) -> HtmlSection | None:
    """The section, or None when the run recorded neither prompts nor answers."""
    prompts = manifest.get("prompts") or []
    samples = summary.get("samples") or []
    if not prompts and not samples:
        return None
    section = HtmlSection("Prompts and sample answers")
    section.paragraph(
        "Each template rendered for the first agents that send a distinct text (the full list: "
        "biasim validate STUDY --show-prompts), then answers drawn at random (with the study's "
        "seed) per group, cut at 400 characters. Read them before any number: a model that "
        "misreads the prompt makes every rate below meaningless."
    )
    stages = list(dict.fromkeys([p["stage"] for p in prompts] + [s["stage"] for s in samples]))
    for stage in stages:
        section.heading(f"Stage {stage}")
        for field in dict.fromkeys(p["field"] for p in prompts if p["stage"] == stage):
            texts = [p for p in prompts if p["field"] == field]
            section.raw(_prompt_html(texts[0]))
            # Further texts of one template differ by a persona or level: folded.
            for other in texts[1:]:
                who = html.escape((other.get("agents") or [""])[0])
                section.raw(
                    f"<details><summary>{html.escape(field)} as sent by {who}</summary>"
                    f"{_prompt_html(other)}</details>"
                )
        mine = [s for s in samples if s["stage"] == stage]
        if mine:
            section.raw(_samples_html(mine))
    return section


def _prompt_html(prompt: dict[str, Any]) -> str:
    agents = prompt.get("agents") or []
    who = agents[0] if agents else ""
    more = f" and {len(agents) - 1} more agent(s)" if len(agents) > 1 else ""
    count = prompt.get("of", 1)
    shown = f" ({count} distinct texts; this one)" if count > 1 else ""
    return (
        f'<div class="card prompt"><p class="muted">{html.escape(prompt["field"])}{shown}, '
        f"sent by {html.escape(who)}{html.escape(more)}</p>"
        f"<pre>{html.escape(prompt['text'])}</pre></div>"
    )


def _samples_html(samples: list[dict[str, Any]]) -> str:
    models = len({s["model_label"] for s in samples}) > 1
    axis = samples[0].get("axis") or "group"
    labels = [*(["model"] if models else []), axis, "answer"]
    head = "".join(f'<th class="t">{html.escape(label)}</th>' for label in labels)
    rows = "".join(
        '<tr class="sample">'
        + (f'<td class="t">{html.escape(s["model_label"])}</td>' if models else "")
        + f'<td class="t">{html.escape(str(s.get("group") or "-"))}</td>'
        + f'<td class="t answer">{html.escape(s["answer"])}</td></tr>'
        for s in samples
    )
    return (
        '<div class="scroll"><table class="samples"><caption>Sample answers</caption>'
        f"<thead><tr>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )
