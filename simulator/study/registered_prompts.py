"""How a template's call of a registered prompt (``registry.PROMPTS``) fills its parameters.

One rule, applied twice: when the call renders (:func:`bind`) and when ``biasim validate`` reads
the template (:func:`call_problems`, which also finds a bad call in a branch no dry-render
takes). Positional arguments fill the declared parameters in order, keywords fill them by name;
an extra, missing or twice-given argument is refused with the parameters named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jinja2 import nodes

from biasim.registry import PROMPTS, MissingExtra, Prompt, UnknownPlugin


class PromptCallError(TypeError):
    """A registered prompt called with arguments that do not fill its parameters."""


def load(name: str) -> Prompt:
    """The prompt registered as ``name``.

    Raises:
        PromptCallError: The registered object is not a :class:`~biasim.registry.Prompt` (a
            plug-in registered a bare template: its parameters would be guessed).
    """
    prompt = PROMPTS.load(name)
    if not isinstance(prompt, Prompt):
        raise PromptCallError(
            f"the registered prompt `{name}` is a {type(prompt).__name__}, not a "
            "biasim.registry.Prompt declaring its parameters"
        )
    return prompt


def problem(name: str, parameters: Sequence[str], positional: int, keywords: Sequence[str]) -> str:
    """Why a call of ``name`` with ``positional`` arguments and ``keywords`` does not fill
    ``parameters`` exactly, or ``""``."""
    takes = f"`{name}({', '.join(parameters)})`"
    if positional > len(parameters):
        return f"{takes} takes {len(parameters)} argument(s); {positional} given"
    filled = list(parameters[:positional])
    for key in keywords:
        if key not in parameters:
            return f"{takes} has no parameter `{key}`"
        if key in filled:
            return f"{takes} got `{key}` twice"
        filled.append(key)
    missing = [p for p in parameters if p not in filled]
    return f"{takes} is missing {', '.join(f'`{p}`' for p in missing)}" if missing else ""


def bind(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The prompt's source and the variables a call fills.

    Raises:
        PromptCallError: The arguments do not fill the parameters exactly.
    """
    prompt = load(name)
    if why := problem(name, prompt.parameters, len(args), list(kwargs)):
        raise PromptCallError(why)
    return prompt.source, {**dict(zip(prompt.parameters, args, strict=False)), **kwargs}


def call_problems(tree: nodes.Template) -> list[tuple[int, str]]:
    """Each call of a registered prompt in ``tree`` that does not fill its parameters, with
    its line. A name the template itself assigns (a macro, a ``set``) is the template's, and a
    call spreading ``*args`` or ``**kwargs`` is checked when it renders."""
    own = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "store"}
    own |= {m.name for m in tree.find_all(nodes.Macro)}
    found = []
    for call in tree.find_all(nodes.Call):
        name = call.node.name if isinstance(call.node, nodes.Name) else None
        if name is None or name in own or name not in PROMPTS or call.dyn_args or call.dyn_kwargs:
            continue
        try:
            parameters = load(name).parameters
        except (MissingExtra, UnknownPlugin, PromptCallError) as exc:
            found.append((call.lineno, str(exc)))
            continue
        if why := problem(name, parameters, len(call.args), [k.key for k in call.kwargs]):
            found.append((call.lineno, why))
    return found
