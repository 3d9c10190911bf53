"""What the ``http`` and ``python`` backends share: the inputs a decision tool gets from a
stage's request, and the answer its reply becomes.

A decision tool (a résumé scorer behind an API, an in-house scikit-learn model) is not a chat
model: it takes a document and perhaps some fields, and returns scores or labels. Its inputs
come from the stage as for any model: ``document`` is the stage's rendered prompt (the text the
tool scores, with the applicant's name and whatever the template puts in), ``system`` the
rendered system message, and ``fields`` the document itself when the stage writes it as a JSON
object (a structured applicant record), else empty. The persona's attributes are never passed:
the tool sees only what the stage's template shows, as a language model would, so the cache key
(every message) covers everything it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from biasim.simulator.llm.answer_paths import AnswerPath, map_answer
from biasim.simulator.llm.errors import FatalBackendError
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: The names of a decision tool's inputs (a body template's variables, a function's keywords).
TOOL_INPUTS = ("document", "system", "fields")


@dataclass(frozen=True)
class ToolInputs:
    """A call's inputs as a decision tool gets them.

    Attributes:
        document: The stage's rendered prompt (last user message).
        system: The rendered system message, or ``""``.
        fields: The document parsed, when it is a JSON object; else empty.
    """

    document: str
    system: str
    fields: dict[str, Any]

    def context(self) -> dict[str, Any]:
        """The variables a request-body template sees."""
        return {"document": self.document, "system": self.system, "fields": self.fields}


def tool_inputs(request: LLMRequest) -> ToolInputs:
    """The inputs of ``request`` for a decision tool."""
    document = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
    system = next((m["content"] for m in request.messages if m["role"] == "system"), "")
    try:
        parsed = orjson.loads(document)
    except orjson.JSONDecodeError:
        parsed = None
    return ToolInputs(document, system, parsed if isinstance(parsed, dict) else {})


def tool_answer(reply: Any, mapping: Mapping[str, AnswerPath] | None) -> LLMResponse:
    """The response a tool's ``reply`` makes: its mapped fields as the answer's JSON text,
    checked against the stage's output fields like any model's answer.

    Raises:
        FatalBackendError: The reply lacks a mapped path, is not an object when unmapped, or
            holds values that are not JSON data.
    """
    answer = map_answer(reply, mapping)
    try:
        # numpy scalars and arrays included: a scikit-learn model returns them.
        text = orjson.dumps(answer, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    except TypeError as exc:
        raise FatalBackendError(f"the answer is not JSON data ({exc})") from exc
    return LLMResponse(text=text.decode())


def mapping_identity(mapping: Mapping[str, AnswerPath] | None) -> dict[str, str] | None:
    """The mapping as the cache key and the manifest name it (paths as written)."""
    return None if mapping is None else {name: path.text for name, path in mapping.items()}
