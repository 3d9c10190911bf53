"""Error messages that help a study author fix the study: what is allowed in words, which
template variables exist at that place, and the nearest name to a misspelt one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jinja2 import nodes

from biasim.registry import nearest
from biasim.simulator.study.fields import (
    IDENTIFIER_PATTERN,
    LABEL_PATTERN,
    LEVEL_PATTERN,
    PATTERN_WORDS,
)
from biasim.simulator.study.templating import parse_template

#: Characters each name pattern refuses, to propose a name it accepts.
_REFUSED = {
    IDENTIFIER_PATTERN: r"[^A-Za-z0-9_]",
    LEVEL_PATTERN: r"[^A-Za-z0-9_.-]",
    LABEL_PATTERN: r"[^A-Za-z0-9_.:-]",
}
_MISSING = object()


def pattern_message(value: Any, pattern: str) -> str:
    """Why ``value`` is not an allowed name, in words, with an allowed name close to it."""
    words = PATTERN_WORDS.get(pattern)
    if words is None:
        return f"`{value}` does not match the pattern {pattern}"
    fixed = re.sub(_REFUSED[pattern], "_", str(value)).strip("_") if value else ""
    if fixed and pattern == IDENTIFIER_PATTERN and fixed[0].isdigit():
        fixed = f"_{fixed}"
    return f"`{value}` is not allowed: {words}" + (f"; e.g. `{fixed}`" if fixed else "")


def synthetic_hint(owner: str) -> str:
    """How to drop a synthetic table that no longer fits (e.g. inherited with ``extends``
    by a study that changed the axes or choices)."""
    return (
        f"; to drop these declared answers (the synthetic responder then answers uniformly; "
        f"real backends never read them), write `synthetic: null` under `{owner}`"
    )


def undefined_message(message: str, source: str | None, context: Mapping[str, Any] | None) -> str:
    """Jinja's undefined-variable error as a study author reads it: which name, the nearest
    that exists, and every variable (or key of the mapping read) available at that place."""
    missing = re.search(r"'([^']+)' is undefined", message)
    if missing:
        name = missing.group(1)
        available = sorted(context) if context is not None else None
        text = f"template variable `{name}` does not exist"
    else:
        attribute = re.search(r"has no attribute '([^']+)'", message)
        if attribute is None:
            return message
        name = attribute.group(1)
        found = _mapping_read(source, name, context) if source and context is not None else None
        if found is None:
            return message
        where, keys = found
        if keys is None:
            return (
                f"`{where}` is none here, so `{where}.{name}` cannot be read: guard it "
                f"(`{{% if {where} %}}...{{% endif %}}`)"
            )
        available = sorted(keys)
        text = f"`{where}.{name}` does not exist"
    if available is None:
        return text
    return text + nearest(name, available) + f" (available here: {', '.join(available)})"


def _mapping_read(
    source: str, attr: str, context: Mapping[str, Any]
) -> tuple[str, list[str] | None] | None:
    """The mapping whose ``.attr`` a template reads and its keys, when the template names it
    plainly (``outputs.persona`` in ``outputs.persona.nme``), or a variable that is none there
    (keys ``None``: a market's ``referrer`` of an applicant nobody referred); ``None`` when it
    cannot be told. A read of a key the mapping has is not the failing one."""
    for node in parse_template(source).find_all(nodes.Getattr):
        if node.attr == attr:
            base = _resolve(node.node, context)
            if base is None:
                return _dotted(node.node), None
            if isinstance(base, Mapping) and attr not in base:
                return _dotted(node.node), [str(k) for k in base]
    return None


def _dotted(node: nodes.Node) -> str:
    if isinstance(node, nodes.Getattr):
        return f"{_dotted(node.node)}.{node.attr}"
    return getattr(node, "name", "?")


def _resolve(node: nodes.Node, context: Mapping[str, Any]) -> Any:
    if isinstance(node, nodes.Name):
        return context.get(node.name, _MISSING)
    if isinstance(node, nodes.Getattr):
        parent = _resolve(node.node, context)
        return parent.get(node.attr, _MISSING) if isinstance(parent, Mapping) else _MISSING
    return _MISSING
