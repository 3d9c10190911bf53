"""Where a decision tool's answer sits in what it returns: a dotted path or a simple JSONPath.

The ``http`` and ``python`` backends map a tool's reply (a JSON body, a returned dict) to the
stage's output fields with ``response: {FIELD: PATH}``. A path is ``$.result.score``,
``result.score``, ``items[0].label`` or ``$.ranking[-1]``: keys separated by dots, each
optionally followed by list indexes. Paths are parsed when the role is checked, so a malformed
one is exit 2 naming its field; a path the reply lacks is a per-call error naming where it broke.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError

_SEGMENT = re.compile(r"(?P<key>[^.\[\]]+)?(?P<indexes>(?:\[-?\d+\])*)")
_INDEX = re.compile(r"\[(-?\d+)\]")
#: Longest path accepted: a mapping names a field, not a document.
MAX_PATH_CHARS = 300

Step = str | int


@dataclass(frozen=True)
class AnswerPath:
    """One parsed path: its text as written and its steps (keys and list indexes)."""

    text: str
    steps: tuple[Step, ...]

    def read(self, reply: Any) -> Any:
        """The value at this path in ``reply``.

        Raises:
            FatalBackendError: The reply has nothing there (named with the part that was
                found and what it held instead).
        """
        value = reply
        for depth, step in enumerate(self.steps):
            found = _step(value, step)
            if found is _MISSING:
                where = _render(self.steps[:depth]) or "the reply"
                raise FatalBackendError(
                    f"the reply has no `{self.text}`: {where} {_holds(value)}, no {_show(step)}"
                )
            value = found
        return value


_MISSING = object()


def _step(value: Any, step: Step) -> Any:
    if isinstance(step, int):
        if isinstance(value, list) and -len(value) <= step < len(value):
            return value[step]
        return _MISSING
    if isinstance(value, Mapping) and step in value:
        return value[step]
    return _MISSING


def _holds(value: Any) -> str:
    if isinstance(value, Mapping):
        keys = ", ".join(sorted(map(str, value))[:10])
        return f"has keys [{keys}]"
    if isinstance(value, list):
        return f"is a list of {len(value)}"
    return f"is {type(value).__name__} {str(value)[:40]!r}"


def _show(step: Step) -> str:
    return f"index [{step}]" if isinstance(step, int) else f"key `{step}`"


def _render(steps: tuple[Step, ...]) -> str:
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return f"`{out}`" if out else ""


def parse_path(text: Any, field: str) -> AnswerPath:
    """Parse ``text`` (``$.a.b``, ``a.b``, ``items[0].label``).

    Raises:
        BackendConfigError: Not a string, too long, or not of that form; names ``field``.
    """
    if not isinstance(text, str) or not text.strip():
        raise BackendConfigError("must be a path such as `$.result.score`", field=field)
    if len(text) > MAX_PATH_CHARS:
        raise BackendConfigError(f"a path is at most {MAX_PATH_CHARS} characters", field=field)
    body = text.strip()
    body = body[1:] if body.startswith("$") else body
    body = body[1:] if body.startswith(".") else body
    steps: list[Step] = []
    for part in body.split(".") if body else []:
        match = _SEGMENT.fullmatch(part)
        if match is None or (not match["key"] and not match["indexes"]):
            raise BackendConfigError(
                f"`{text}` is not a path: write keys separated by dots, each with optional "
                "list indexes (`$.result.score`, `items[0].label`)",
                field=field,
            )
        if match["key"]:
            steps.append(match["key"].strip())
        steps.extend(int(i) for i in _INDEX.findall(match["indexes"]))
    return AnswerPath(text.strip(), tuple(steps))


def parse_mapping(value: Any, field: str) -> dict[str, AnswerPath] | None:
    """The ``response`` option: output field -> path, or ``None`` (the reply is the answer).

    Raises:
        BackendConfigError: Not a mapping of field names to paths.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise BackendConfigError(
            "must map each output field to a path in the reply, e.g. "
            "`{score: $.result.score, decision: items[0].label}`",
            field=field,
        )
    return {str(name): parse_path(path, f"{field}.{name}") for name, path in value.items()}


def map_answer(reply: Any, mapping: Mapping[str, AnswerPath] | None) -> dict[str, Any]:
    """The structured answer in ``reply``: each mapped field read at its path, or the reply
    itself when there is no mapping.

    Raises:
        FatalBackendError: A path the reply lacks, or an unmapped reply that is no JSON object.
    """
    if mapping is None:
        if not isinstance(reply, Mapping):
            raise FatalBackendError(
                f"the reply {_holds(reply)}, not an object of the output fields; map its "
                "fields with `response: {FIELD: PATH}`"
            )
        return dict(reply)
    return {name: path.read(reply) for name, path in mapping.items()}
