"""OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, ...).

Requests go out through a lean aiohttp transport by default or the official SDK
(``transport: sdk``), see :mod:`simulator.llm.openai_transport`; either way the retry layer
(:mod:`simulator.llm.retry`) is the only one that retries. A role may list several servers of
the same model (``base_url: [...]``): :mod:`simulator.llm.endpoints` spreads the calls.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson

from biasim.simulator.llm.egress import Egress, Host
from biasim.simulator.llm.endpoints import ServerPool
from biasim.simulator.llm.errors import BackendConfigError, BackendError, TransientError
from biasim.simulator.llm.http_common import (
    DEFAULT_API_KEY_ENV,
    check_options,
    option_str,
    public_url,
    resolve_api_key,
    structured_mode,
)
from biasim.simulator.llm.logprobs import token_logprobs
from biasim.simulator.llm.openai_transport import AiohttpTransport, SdkTransport, Transport
from biasim.simulator.llm.retry import ATTEMPT_DEADLINE
from biasim.simulator.llm.types import LLMRequest, LLMResponse, completion_prompt, extra_sampling

HOSTED_BASE_URL = "https://api.openai.com/v1"
_OPTIONS = {"base_url", "api_key_env", "structured", "transport"}
_STRUCTURED_MODES = ("auto", "json_schema", "json_object_schema", "json_object", "none")
_TRANSPORTS = ("aiohttp", "sdk")
# The event loop runs a timer up to its clock resolution early.
_TIMER_SLACK_S = 0.001


class OpenAIBackend:
    """Chat completions (``/chat/completions``), or plain completions (``/completions``) for a
    role with ``endpoint: completions``.

    Options:
        base_url: Server URL, or a list of servers of the same model (default:
            ``OPENAI_BASE_URL`` or the hosted API).
        api_key_env: Environment variable holding the key (default ``OPENAI_API_KEY``). When it
            is unset a local server gets a placeholder key; the hosted API is a config error.
        structured: How a JSON Schema is enforced: ``json_schema`` (strict structured outputs,
            default), ``json_object`` (JSON mode; the prompt describes the fields) or ``none``.
        transport: ``aiohttp`` (default, lean) or ``sdk`` (the official ``openai`` client).
    """

    name = "openai"
    synthetic = False
    endpoints = ("chat", "completions")
    sampling_extras = frozenset({"frequency_penalty", "presence_penalty", "stop"})
    default_concurrency = 16

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        if not role.model:
            raise BackendConfigError(
                "the openai backend needs a model id, e.g. `model: gpt-4o-mini`", field="model"
            )
        self.model = str(role.model)
        self.structured = structured_mode(options, _STRUCTURED_MODES, "auto")
        transport = option_str(options, "transport", "aiohttp")
        if transport not in _TRANSPORTS:
            raise BackendConfigError(
                f"`transport` must be one of {list(_TRANSPORTS)}, not {transport!r}",
                field="options.transport",
            )
        # `auto` asks for a JSON-schema response_format until the server rejects it once.
        self._schema_format_rejected = False
        urls = _base_urls(options)
        self._key_env = option_str(options, "api_key_env", DEFAULT_API_KEY_ENV) or ""
        # Every server gets the same key; a hosted one among local ones still needs it set.
        api_key = resolve_api_key(self._key_env, urls[0])
        for url in urls[1:]:
            resolve_api_key(self._key_env, url)
        if transport == "sdk":
            self._transport: Transport = SdkTransport(urls, api_key, self._secret)
        else:
            full = [url or HOSTED_BASE_URL for url in urls]
            self._transport = AiohttpTransport(full, api_key, self._secret)
        servers = [public_url(url or HOSTED_BASE_URL) or "" for url in urls]
        self.base_url: str | list[str] = servers[0] if len(servers) == 1 else servers
        # With several servers each adapts its own bound and the role's stays fixed (see
        # BackendRuntime); one server keeps the role's adaptive bound as before.
        self.adapts_per_server = len(servers) > 1
        limit = getattr(role, "max_concurrency", None) or self.default_concurrency
        self.pool = ServerPool(servers, limit, adaptive=self.adapts_per_server)

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """Its servers (the study's ``base_url``, else ``OPENAI_BASE_URL``, else the hosted API)
        and its key variable (``api_key_env``, default ``OPENAI_API_KEY``)."""
        options = dict(role.options)
        key_env = option_str(options, "api_key_env", DEFAULT_API_KEY_ENV) or DEFAULT_API_KEY_ENV
        chosen = "options.base_url" if options.get("base_url") is not None else None
        hosts = tuple(Host(url or HOSTED_BASE_URL, chosen) for url in _base_urls(options))
        key_field = "options.api_key_env" if key_env != DEFAULT_API_KEY_ENV else None
        return Egress(hosts, (key_env,), key_field)

    def identity(self) -> dict[str, Any]:
        """Backend, model, server(s) and structured mode (never the key, nor the transport,
        which does not change answers)."""
        return {
            "backend": self.name,
            "model": self.model,
            # Servers sorted: listing the same fleet in another order asks the same model.
            "base_url": sorted(self.base_url) if isinstance(self.base_url, list) else self.base_url,
            "structured": self.structured,
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One chat completion, or one plain completion for ``endpoint: completions``.

        Raises:
            BackendError: Normalised failure.
        """
        kwargs = self._sampling_body(request)
        if request.endpoint == "completions":
            # A base model writes no enforced JSON: a schema is checked by the engine only.
            kwargs["prompt"] = completion_prompt(request.messages)
            return await self._post("/completions", kwargs, "text")
        kwargs = self.chat_body(request)
        try:
            return await self._post("/chat/completions", kwargs, "message")
        except BackendError as exc:
            if not self._schema_format_unsupported(kwargs, exc):
                raise
            # JSON mode plus our own validation, for every later call too.
            self._schema_format_rejected = True
            kwargs["response_format"] = {"type": "json_object"}
            return await self._post("/chat/completions", kwargs, "message")

    def _sampling_body(self, request: LLMRequest) -> dict[str, Any]:
        """The body fields every endpoint takes: model, sampling, cap and log-probabilities."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            **extra_sampling(request),
        }
        if request.max_tokens is not None:  # no cap: the server's own limit
            kwargs["max_tokens"] = request.max_tokens
        if request.top_logprobs:
            # Plain completions take the count as `logprobs`; chat a flag and `top_logprobs`.
            chat = request.endpoint != "completions"
            kwargs["logprobs"] = True if chat else request.top_logprobs
            if chat:
                kwargs["top_logprobs"] = request.top_logprobs
        return kwargs

    def chat_body(self, request: LLMRequest) -> dict[str, Any]:
        """The ``/chat/completions`` body of ``request`` (live, or one line of a batch)."""
        kwargs = self._sampling_body(request)
        kwargs["messages"] = list(request.messages)
        response_format = self._response_format(request.json_schema)
        if response_format is not None:
            kwargs["response_format"] = response_format
        return kwargs

    def batch_api(self) -> Any:
        """The server's Batch API (chat completions through the lean transport, first server).

        Raises:
            BackendConfigError: The role's transport cannot upload a batch file.
        """
        from biasim.simulator.llm.batch_api import OpenAIBatches

        if not isinstance(self._transport, AiohttpTransport):
            raise BackendConfigError(
                "`batch: true` sends batch files through the default transport; drop "
                "`transport: sdk`",
                field="options.transport",
            )
        return OpenAIBatches(self._transport, self.chat_body, lambda raw: _answer(raw, "message"))

    def _response_format(self, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        mode = self.structured
        if schema is None or mode == "none":
            return None
        if mode == "auto":
            mode = "json_object" if self._schema_format_rejected else "json_schema"
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": True},
            }
        if mode == "json_object_schema":  # llama.cpp's server: JSON mode constrained by a schema
            return {"type": "json_object", "schema": schema}
        return {"type": "json_object"}

    def _schema_format_unsupported(self, kwargs: dict[str, Any], exc: BackendError) -> bool:
        """Whether ``exc`` is a server refusing the JSON-schema response_format itself."""
        if self.structured != "auto" or self._schema_format_rejected:
            return False
        if kwargs.get("response_format", {}).get("type") != "json_schema":
            return False
        text = str(exc)
        # Servers without the feature answer 400 or 422, or 500 from a request validator
        # (llama.cpp's server), naming the field they refused.
        refused = "response_format" in text or "json_schema" in text
        return refused and any(f"HTTP {code}" in text for code in (400, 422, 500))

    async def _post(self, path: str, body: dict[str, Any], kind: str) -> LLMResponse:
        """The answer of the server the pool picked, naming that server."""
        server = await self.pool.acquire()
        try:
            # Parsed before the slot is released: a garbled body counts against its server.
            response = _answer(await self._transport.post(server.index, path, body), kind)
        except BackendError as exc:
            self.pool.release(server, exc)
            if len(self.pool.servers) == 1:
                raise
            # Which server failed is the first thing to know about a fleet's failures.
            raise type(exc)(f"{server.url}: {exc}", retry_after=exc.retry_after) from exc
        except asyncio.CancelledError as exc:
            # The retry layer's timeout cancels a call its server sat on: that counts against
            # the server (a hung one is drained); an interrupted run says nothing about it.
            loop_time = asyncio.get_running_loop().time()
            timed_out = loop_time >= ATTEMPT_DEADLINE.get() - _TIMER_SLACK_S
            self.pool.release(server, TransientError("timed out") if timed_out else exc)
            raise
        except BaseException as exc:
            self.pool.release(server, exc)
            raise
        self.pool.release(server, None)
        response.server = server.url
        return response

    def _secret(self) -> str | None:
        # Read at error time rather than kept on the instance, so no attribute holds the key.
        return os.environ.get(self._key_env)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._transport.aclose()


def _base_urls(options: dict[str, Any]) -> list[str | None]:
    """The role's servers: ``base_url`` as one string or a list, else ``OPENAI_BASE_URL``, else
    ``[None]`` (the hosted API)."""
    value = options.get("base_url")
    if isinstance(value, list):
        if not value:
            raise BackendConfigError(
                "`base_url` lists no server; give one URL or a list of them",
                field="options.base_url",
            )
        urls = [option_str({"base_url": url}, "base_url") for url in value]
        if len(set(urls)) != len(urls):
            raise BackendConfigError("`base_url` lists a server twice", field="options.base_url")
        return list(urls)
    return [option_str(options, "base_url") or os.environ.get("OPENAI_BASE_URL") or None]


def _answer(raw: bytes, kind: str) -> LLMResponse:
    """The first choice of a raw chat (``kind`` ``message``) or plain (``text``) completion."""
    try:
        completion = orjson.loads(raw)
        choice = completion["choices"][0]
        content = choice["message"].get("content") if kind == "message" else choice["text"]
        usage = completion.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        what = "chat completion" if kind == "message" else "completion"
        if isinstance(exc, orjson.JSONDecodeError):
            raise TransientError(f"malformed response body: not JSON ({exc})") from exc
        raise TransientError(f"malformed response body: no {what} choice") from exc
    return LLMResponse(
        text=content or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        truncated=choice.get("finish_reason") == "length",
        token_logprobs=token_logprobs(choice),
    )
