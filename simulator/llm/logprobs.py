"""Decision probabilities from log-probabilities (DiscrimEval's reading, Tamkin et al. 2023).

One call gives each option of a decision a probability: the model's log-probabilities of the
candidate tokens at the position where the answer's value begins (the first token of the
answer, or of the field's value inside a JSON answer), each option taking the alternatives its
text begins with, normalised over the options. Options must begin with distinct first tokens,
else one token would count for two options; :func:`first_token_clash` says when they do not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

#: Alternatives asked per token (OpenAI's maximum).
TOP_LOGPROBS = 20


def token_logprobs(choice: dict[str, Any]) -> list[tuple[str, dict[str, float]]] | None:
    """The tokens and alternatives of an OpenAI-style choice (chat ``logprobs.content``, or a
    plain completion's ``tokens`` and ``top_logprobs``); ``None`` when it has none."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if isinstance(content, list):
        return [
            (
                str(entry.get("token", "")),
                {str(t["token"]): float(t["logprob"]) for t in entry.get("top_logprobs") or []},
            )
            for entry in content
        ]
    tokens, tops = logprobs.get("tokens"), logprobs.get("top_logprobs")
    if isinstance(tokens, list) and isinstance(tops, list):
        return [
            (str(token), {str(k): float(v) for k, v in (top or {}).items()})
            for token, top in zip(tokens, tops, strict=False)
        ]
    return None


def value_start(text: str, field: str) -> int:
    """Offset of the first character of ``field``'s value in a JSON answer, or of the first
    non-space character of a plain answer."""
    match = re.search(rf'"{re.escape(field)}"\s*:\s*"?', text)
    if match is not None:
        return match.end()
    return len(text) - len(text.lstrip())


def option_probabilities(
    text: str,
    tokens: Sequence[tuple[str, dict[str, float]]],
    field: str,
    options: Sequence[str],
) -> dict[str, float] | None:
    """Each option's probability from the alternatives of the token where the value begins;
    ``None`` when no alternative begins any option (the decision is not in the top tokens)."""
    start = value_start(text, field)
    position = 0
    for token, alternatives in tokens:
        if position + len(token) > start:
            prefix = text[position:start]
            return _normalised(alternatives, prefix, options)
        position += len(token)
    return None


def _normalised(
    alternatives: dict[str, float], prefix: str, options: Sequence[str]
) -> dict[str, float] | None:
    mass = dict.fromkeys(options, 0.0)
    for token, logprob in alternatives.items():
        if not token.startswith(prefix):
            continue
        rest = token[len(prefix) :].lower()
        for option in options:
            low = option.lower()
            if rest and (low.startswith(rest) or rest.startswith(low)):
                mass[option] += math.exp(logprob)
                break
    total = sum(mass.values())
    if total <= 0:
        return None
    return {option: m / total for option, m in mass.items()}


def first_token_clash(
    options: Sequence[str], tokenize: Callable[[str], list[str]] | None
) -> str | None:
    """Why ``options`` cannot be told apart by their first token, or ``None``.

    Args:
        options: The decision's options.
        tokenize: The model's tokenizer (text -> token texts); ``None`` without one, when
            options must begin with different letters.
    """
    firsts = {}
    for option in options:
        if tokenize is None:
            first = option[:1]
        else:
            pieces = tokenize(option)
            first = pieces[0] if pieces else option
        firsts[option] = first.strip().lower()
    for a in options:
        for b in options:
            if a != b and firsts[a] and b.lower().startswith(firsts[a]):
                how = "first token" if tokenize is not None else "first letter (no tokenizer)"
                return (
                    f"options `{a}` and `{b}` share their {how} `{firsts[a]}`: its "
                    "log-probability cannot be split between them; reword one option"
                )
    return None
