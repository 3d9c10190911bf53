"""Anthropic's Messages API (Claude models), native, through the same lean aiohttp transport as
the openai backend: the one retry layer, the endpoint allow-list, the call store and the cost
ledger treat it like any other backend.

Structured answers use tool use: the stage's JSON Schema is the input schema of one tool the
model is made to call, and the tool call's input is the answer.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from biasim.simulator.llm.egress import Egress, Host
from biasim.simulator.llm.errors import BackendConfigError, TransientError
from biasim.simulator.llm.http_common import (
    check_options,
    option_str,
    public_url,
    resolve_api_key,
)
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: Where the backend sends requests, and the variable its key comes from (declared by
#: :meth:`AnthropicBackend.egress`, which the allow-list checks before any call).
ANTHROPIC_DEFAULT_HOST = "api.anthropic.com"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
HOSTED_BASE_URL = f"https://{ANTHROPIC_DEFAULT_HOST}"
API_VERSION = "2023-06-01"
#: The Messages API requires ``max_tokens``; a role without a cap gets this one.
UNCAPPED_MAX_TOKENS = 4096
#: Prompt tokens the Messages API adds for tool use (its own system prompt), as a bound: twice
#: the most Anthropic's tool-use pricing lists for any model (530, Claude 3 Opus with
#: ``tool_choice`` auto), since the list changes with each model.
TOOL_USE_SYSTEM_TOKENS = 1060
_OPTIONS = {"base_url", "api_key_env"}
_TOOL = "answer"


class AnthropicBackend:
    """``POST /v1/messages``.

    Options:
        base_url: Server URL (default: the hosted API).
        api_key_env: Environment variable holding the key (default ``ANTHROPIC_API_KEY``).
    """

    name = "anthropic"
    synthetic = False
    endpoints = ("chat",)
    sampling_extras = frozenset({"stop"})
    default_concurrency = 8
    #: What every call sends as ``max_tokens`` when the role sets none (the cost limit's bound).
    uncapped_max_tokens = UNCAPPED_MAX_TOKENS

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """Its server (the study's ``base_url``, else the hosted API) and its key variable
        (``api_key_env``, default ``ANTHROPIC_API_KEY``)."""
        options = dict(role.options)
        key_env = option_str(options, "api_key_env", ANTHROPIC_KEY_ENV) or ANTHROPIC_KEY_ENV
        url = option_str(options, "base_url")
        host = Host(url, "options.base_url") if url else Host(HOSTED_BASE_URL)
        key_field = "options.api_key_env" if key_env != ANTHROPIC_KEY_ENV else None
        return Egress((host,), (key_env,), key_field)

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        if not role.model:
            raise BackendConfigError(
                "the anthropic backend needs a model id, e.g. `model: claude-3-5-haiku-latest`",
                field="model",
            )
        self.model = str(role.model)
        url = option_str(options, "base_url") or HOSTED_BASE_URL
        self._key_env = option_str(options, "api_key_env", ANTHROPIC_KEY_ENV) or ""
        key = resolve_api_key(self._key_env, url)
        self.base_url = public_url(url) or HOSTED_BASE_URL
        self._url = url
        # Imported here: the allow-list reads this module's host and key variable without
        # loading aiohttp.
        from biasim.simulator.llm.openai_transport import AiohttpTransport

        self._transport = AiohttpTransport(
            [url],
            key,
            self._secret,
            auth={"x-api-key": key, "anthropic-version": API_VERSION},
        )

    def identity(self) -> dict[str, Any]:
        """Backend, model and server (never the key)."""
        return {"backend": self.name, "model": self.model, "base_url": self.base_url}

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One message; a structured answer through a forced tool call."""
        raw = await self._transport.post(0, "/v1/messages", messages_body(self.model, request))
        response = _answer(raw)
        response.server = self.base_url
        return response

    def added_prompt_tokens(self, request: LLMRequest) -> int:
        """A bound on the prompt tokens the API adds to ``request``'s text (for the cost
        limit): for a structured answer, its tool-use system prompt and the tool's definition
        (a token per byte of its JSON)."""
        body = messages_body(self.model, request)
        if "tools" not in body:
            return 0
        tools = orjson.dumps([body["tools"], body["tool_choice"]])
        return TOOL_USE_SYSTEM_TOKENS + len(tools)

    def batch_api(self) -> Any:
        """Message Batches on the role's server."""
        from biasim.simulator.llm.batch_api import AnthropicBatches

        return AnthropicBatches(
            self._transport,
            self._url,
            lambda request: messages_body(self.model, request),
            _answer,
        )

    def _secret(self) -> str | None:
        # Read at error time, so no attribute holds the key.
        return os.environ.get(self._key_env)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._transport.aclose()


def messages_body(model: str, request: LLMRequest) -> dict[str, Any]:
    """The Messages API body of ``request``: system messages apart, the schema as a tool."""
    system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens or UNCAPPED_MAX_TOKENS,
        "messages": [m for m in request.messages if m["role"] != "system"],
        "temperature": min(request.temperature, 1.0),  # Anthropic's range is [0, 1]
    }
    if system:
        body["system"] = system
    if request.top_p < 1.0:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.json_schema is not None:
        body["tools"] = [
            {
                "name": _TOOL,
                "description": "Give your answer in these fields.",
                "input_schema": request.json_schema,
            }
        ]
        body["tool_choice"] = {"type": "tool", "name": _TOOL}
    return body


def _answer(raw: bytes) -> LLMResponse:
    """Text (or the forced tool call's input, as JSON), token counts and the stop reason."""
    try:
        message = orjson.loads(raw)
        blocks = message["content"]
        usage = message.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise TransientError(f"malformed response body: no message ({exc})") from exc
    tool = [b for b in blocks if b.get("type") == "tool_use"]
    if tool:
        text = orjson.dumps(tool[0].get("input")).decode()
    else:
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    return LLMResponse(
        text=text,
        prompt_tokens=int(usage.get("input_tokens") or 0),
        completion_tokens=int(usage.get("output_tokens") or 0),
        truncated=message.get("stop_reason") == "max_tokens",
    )
