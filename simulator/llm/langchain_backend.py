"""Any LangChain chat model, built with ``langchain.chat_models.init_chat_model``.

``model`` is ``provider:model`` (``openai:gpt-4o-mini``, ``ollama:llama3.2``). Sampling changes
with every request (the seed always does), so the chat model is built once and each call works
on a shallow ``model_copy`` with that call's sampling fields: the copy shares the provider's HTTP
clients, so no connection pool is created per call.

Failures are translated with the very functions the OpenAI and Ollama backends use: LangChain
lets the provider SDK's exceptions through (``langchain-openai`` re-raises them as subclasses of
the ``openai`` ones), so one mapping covers both paths.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from biasim.simulator.llm.egress import Egress, Host
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError, TransientError
from biasim.simulator.llm.http_common import (
    DEFAULT_API_KEY_ENV,
    SDK_TIMEOUT_S,
    check_options,
    map_body_error,
    map_openai_error,
    option_str,
    public_url,
    resolve_api_key,
    structured_mode,
)
from biasim.simulator.llm.netguard import httpx_hooks
from biasim.simulator.llm.ollama_backend import DEFAULT_HOST as OLLAMA_DEFAULT_HOST
from biasim.simulator.llm.ollama_backend import OLLAMA_KEY_ENV, map_ollama_error
from biasim.simulator.llm.types import LLMRequest, LLMResponse

_OPTIONS = {"base_url", "api_key_env", "kwargs", "structured"}
_STRUCTURED_MODES = ("json_schema", "json_object", "none")
# Providers whose with_structured_output(method="json_schema") is the server's own constrained
# decoding; elsewhere structure is opt-in, since some integrations emulate it with tool calls.
_NATIVE_STRUCTURED = frozenset({"openai", "ollama"})
_LC_METHOD = {"json_schema": "json_schema", "json_object": "json_mode"}

# Our sampling parameter -> the chat model's field, per provider. Anything a provider lacks is
# dropped (checked against the class's fields once, at construction).
_SAMPLING_FIELDS: dict[str, dict[str, str]] = {
    "openai": {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_tokens",
        "seed": "seed",
    },
    "ollama": {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "num_predict",
        "seed": "seed",
    },
}
_DEFAULT_SAMPLING_FIELDS = {"temperature": "temperature", "max_tokens": "max_tokens"}

# kwargs that would be silently overridden per call, or would put a secret in the study file.
_RESERVED_KWARGS = frozenset(
    {
        "model",
        "model_provider",
        "base_url",
        "temperature",
        "top_p",
        "max_tokens",
        "num_predict",
        "seed",
    }
)
# A kwargs key naming where requests go. It matches every such field and alias of the installed
# integrations (ChatOpenAI's base_url / openai_api_base / openai_proxy, AzureChatOpenAI's
# azure_endpoint, ChatOllama's base_url, httpx's base_url / proxy / mounts in client_kwargs;
# tests/unit/llm/test_egress_declarations.py checks them against the classes) and those of other
# providers (api_base, endpoint, host, server_url, ...): a false alarm costs one --allow-endpoint.
_SERVER_KEY = re.compile(
    r"url|uri|host|endpoint|prox|server|mount|transport|address|(^|_)base($|_)"
)
# Keys naming a route to the server (a proxy) rather than the server.
_ROUTE_KEY = re.compile(r"prox|mount|transport")
_SECRET_NAME = re.compile(
    r"(^|_)(api_?key|key|token|access_token|secret|password|authorization|credentials?)$"
)


class LangChainBackend:
    """A LangChain chat model in service.

    Options:
        base_url: Server URL handed to the chat model (``base_url``).
        api_key_env: Environment variable holding the key. For ``openai`` it defaults to
            ``OPENAI_API_KEY`` (a placeholder is used for local servers when unset); for other
            providers the key is passed as ``api_key`` only when this is set, and for ``ollama``
            as a bearer token.
        kwargs: Extra keyword arguments for ``init_chat_model`` (no secrets, no sampling
            parameters: those come from the role).
        structured: ``json_schema`` (default for openai and ollama), ``json_object`` (the
            provider's JSON mode) or ``none`` (free text; default for other providers).
    """

    name = "langchain"
    synthetic = False
    default_concurrency = 8

    def __init__(self, role: Any) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        spec = str(role.model or "")
        provider = _provider(spec)
        model_name = spec.partition(":")[2]
        self.model = spec
        self.provider = provider
        self.structured = structured_mode(
            options, _STRUCTURED_MODES, "json_schema" if provider in _NATIVE_STRUCTURED else "none"
        )
        extra = _checked_kwargs(options)
        self.kwargs = dict(extra)
        base_url = option_str(options, "base_url")
        key_env = option_str(options, "api_key_env")
        self.base_url = public_url(base_url)
        # The server the key is resolved for is the one the declaration names (a URL in
        # `kwargs` included), so a key never goes where the allow-list did not look.
        chosen = [host.url for host in self.egress(role).hosts if _is_endpoint(host)]
        env_url = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
        effective_url = chosen[0] if chosen else env_url if provider == "openai" else None

        build = dict(self.kwargs)
        self._http_client: Any = None
        if provider == "openai":
            key_env = key_env or DEFAULT_API_KEY_ENV
            build["api_key"] = resolve_api_key(key_env, effective_url)
            build.setdefault("max_retries", 0)  # the retry layer is the only one that retries
            build.setdefault("timeout", SDK_TIMEOUT_S)
        elif provider == "ollama":
            client_kwargs = dict(build.pop("client_kwargs", None) or {})
            client_kwargs.setdefault("timeout", httpx.Timeout(SDK_TIMEOUT_S, connect=30.0))
            if key_env:
                key = os.environ.get(key_env)
                if not key:
                    raise BackendConfigError(
                        f"environment variable {key_env} is not set", field="options.api_key_env"
                    )
                headers = dict(client_kwargs.get("headers") or {})
                headers["Authorization"] = f"Bearer {key}"
                client_kwargs["headers"] = headers
            build["client_kwargs"] = client_kwargs
            # The async client (the one calls use) checks each request and redirect; the sync
            # one, never used, takes no async hooks.
            build["async_client_kwargs"] = {
                **(build.get("async_client_kwargs") or {}),
                "event_hooks": httpx_hooks(),
            }
        elif key_env:
            build["api_key"] = resolve_api_key(key_env, effective_url)
        if base_url:
            build["base_url"] = base_url
        self._key_env = key_env
        self._model = self._build(model_name.strip(), build)
        fields = type(self._model).model_fields
        if (
            "max_retries" in fields
            and "max_retries" not in self.kwargs
            and (getattr(self._model, "max_retries", None) != 0)
        ):
            # Integrations that retry on their own (``None`` usually means the SDK's default of
            # two retries) build their SDK client with that setting at construction, so
            # switching it off means building again, not copying.
            build["max_retries"] = 0
            self._model = self._build(model_name.strip(), build)
        table = _SAMPLING_FIELDS.get(provider, _DEFAULT_SAMPLING_FIELDS)
        self._sampling = {ours: theirs for ours, theirs in table.items() if theirs in fields}

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """The servers the chat model will contact and the variables whose values it sends.

        A server is chosen by ``options.base_url`` or by any ``kwargs`` entry that names one
        (see :func:`_kwargs_hosts`), else it is the integration's default. For the providers
        whose source biasim knows (openai, azure_openai, ollama; :func:`_provider_defaults`)
        the declaration is complete; any other provider is ``undeclared``.

        Raises:
            BackendConfigError: No ``provider:model``, or ``kwargs`` that may not be written.
        """
        options = dict(role.options)
        provider = _provider(str(role.model or ""))
        chosen = list(_kwargs_hosts(_checked_kwargs(options), "options.kwargs"))
        base_url = option_str(options, "base_url")
        if base_url:
            chosen.insert(0, Host(base_url, "options.base_url"))
        key_env = option_str(options, "api_key_env")
        known = _provider_defaults(provider, key_env)
        if known is None:
            keys = (key_env,) if key_env else ()
            field = "options.api_key_env" if key_env else None
            return Egress(tuple(chosen), keys, field, undeclared=f"langchain:{provider}")
        urls, keys, default_key = known
        # A proxy the study names carries the requests; the endpoint is still the default.
        defaults = () if any(map(_is_endpoint, chosen)) else tuple(Host(url) for url in urls)
        hosts = (*chosen, *defaults)
        field = "options.api_key_env" if key_env and key_env != default_key else None
        return Egress(hosts, keys, field)

    def _build(self, model_name: str, kwargs: dict[str, Any]) -> Any:
        if self.provider == "openai" and "http_async_client" not in kwargs:
            # Our own pool, so aclose() can close it: langchain-openai otherwise shares one
            # cached pool per base URL across every ChatOpenAI in the process.
            if self._http_client is None:
                import openai

                self._http_client = openai.DefaultAsyncHttpxClient(
                    timeout=SDK_TIMEOUT_S, event_hooks=httpx_hooks()
                )
            kwargs = {**kwargs, "http_async_client": self._http_client}
        try:
            from langchain.chat_models import init_chat_model

            return init_chat_model(model_name, model_provider=self.provider, **kwargs)
        except ImportError as exc:
            message = str(exc)
            if "pip install" not in message:
                message += f"; install it with `pip install langchain-{self.provider}`"
            raise BackendConfigError(
                f"LangChain provider `{self.provider}` is not available: {message}", field="model"
            ) from exc
        except (ValueError, TypeError) as exc:  # unknown provider, rejected keyword argument
            raise BackendConfigError(
                f"cannot build LangChain chat model `{self.model}`: {exc}", field="model"
            ) from exc

    def identity(self) -> dict[str, Any]:
        """Provider, model, server, structured mode and extra kwargs (never a key)."""
        return {
            "backend": self.name,
            "model": self.model,
            "provider": self.provider,
            "base_url": self.base_url,
            "structured": self.structured,
            "kwargs": self.kwargs,
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One call through the chat model, structured via its own mechanism when asked.

        Raises:
            BackendError: Normalised failure (the OpenAI/Ollama mappings).
        """
        values = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
            "seed": request.seed,
        }
        model = self._model.model_copy(
            update={theirs: values[ours] for ours, theirs in self._sampling.items()}
        )
        messages = _to_langchain(request.messages)
        parsed: Any = None
        try:
            if request.json_schema is not None and self.structured != "none":
                runnable = model.with_structured_output(
                    self._schema_argument(request.json_schema),
                    method=_LC_METHOD[self.structured],
                    include_raw=True,
                )
                out = await runnable.ainvoke(messages)
                message, parsed = out["raw"], out.get("parsed")
            else:
                message = await model.ainvoke(messages)
        except Exception as exc:
            cut = _length_cutoff(exc)
            if cut is not None:
                return cut
            secret = os.environ.get(self._key_env) if self._key_env else None
            mapped = (
                map_openai_error(exc, secret)
                or map_ollama_error(exc, secret)
                or map_body_error(exc)
            )
            if mapped is None:
                raise
            raise mapped from exc
        text = _text_of(message)
        if not text and parsed is not None:
            # Some integrations return the structure only as parsed data (e.g. via tool calls).
            text = json.dumps(parsed.model_dump() if hasattr(parsed, "model_dump") else parsed)
        usage = getattr(message, "usage_metadata", None) or {}
        meta = getattr(message, "response_metadata", None) or {}
        return LLMResponse(
            text=text,
            prompt_tokens=int(usage.get("input_tokens", 0) or 0),
            completion_tokens=int(usage.get("output_tokens", 0) or 0),
            # OpenAI-style integrations say `finish_reason`, Ollama's `done_reason`.
            truncated="length" in (meta.get("finish_reason"), meta.get("done_reason")),
        )

    def _schema_argument(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self.provider == "openai":
            # The same response_format the OpenAI backend sends: named, strict.
            return {"name": "answer", "schema": schema, "strict": True}
        if self.provider == "ollama":
            return schema  # sent verbatim as Ollama's `format`
        # Generic integrations convert dict schemas as functions, which need a title.
        return {"title": "answer", **schema}

    async def aclose(self) -> None:
        """Close the connection pools this backend created."""
        if self._http_client is not None:
            await self._http_client.aclose()
        # ChatOllama builds one ollama client pair per instance (private attributes: no public
        # close exists); the copies made per call share them, so closing once is enough.
        async_client = getattr(self._model, "_async_client", None)
        if async_client is not None and hasattr(async_client, "close"):
            await async_client.close()
        sync_client = getattr(self._model, "_client", None)
        if sync_client is not None and hasattr(sync_client, "close"):
            sync_client.close()


def _provider(spec: str) -> str:
    """The provider of ``provider:model``, normalised.

    Raises:
        BackendConfigError: ``spec`` names no provider or no model.
    """
    provider, _, model_name = spec.partition(":")
    provider = provider.strip().lower().replace("-", "_")
    if not provider or not model_name.strip():
        raise BackendConfigError(
            "the langchain backend needs `model: provider:model`, e.g. `openai:gpt-4o-mini` "
            "or `ollama:llama3.2`",
            field="model",
        )
    return provider


def _checked_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """``options.kwargs``, refused where it sets what the role sets or holds a secret.

    Raises:
        BackendConfigError: Not a mapping, a reserved key, or a secret at any depth (a header
            such as ``client_kwargs.headers.Authorization`` included).
    """
    extra = options.get("kwargs", {})
    if not isinstance(extra, dict):
        raise BackendConfigError("`kwargs` must be a mapping", field="options.kwargs")
    for key in extra:
        if str(key).lower() in _RESERVED_KWARGS:
            raise BackendConfigError(
                f"`{key}` is set by the role (model, sampling) or by options.base_url, "
                "not by options.kwargs",
                field=f"options.kwargs.{key}",
            )
    secret = _secret_field(extra, "options.kwargs")
    if secret is not None:
        raise BackendConfigError(
            f"`{secret.rpartition('.')[2]}` may not be written in a study file; name the "
            "environment variable that holds the key with `api_key_env`",
            field=secret,
        )
    return extra


def _secret_field(value: Any, field: str) -> str | None:
    """The first field under ``value`` whose name says it holds a secret, or ``None``."""
    if not isinstance(value, dict):
        return None
    for key, inner in value.items():
        here = f"{field}.{key}"
        if _SECRET_NAME.search(str(key).lower()):
            return here
        found = _secret_field(inner, here)
        if found is not None:
            return found
    return None


def _kwargs_hosts(value: Any, field: str, named: bool = False) -> Iterator[Host]:
    """Every server ``kwargs`` chooses: a string under a key that names a server, or any string
    that is a URL, at any depth (``client_kwargs: {proxy: ...}``, ``mounts``).

    A list item reports its list's field (a source location has no index for it).
    """
    if isinstance(value, dict):
        for key, inner in value.items():
            names_server = named or bool(_SERVER_KEY.search(str(key).lower()))
            yield from _kwargs_hosts(inner, f"{field}.{key}", names_server)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _kwargs_hosts(inner, field, named)
    elif isinstance(value, str) and value.strip() and (named or "://" in value):
        yield Host(value.strip(), field)


def _is_endpoint(host: Host) -> bool:
    """Whether a server the study chose is the endpoint itself, not a proxy on the way."""
    last = (host.field or "").rpartition(".")[2].lower()
    return host.field is not None and not _ROUTE_KEY.search(last)


def _provider_defaults(
    provider: str, key_env: str | None
) -> tuple[tuple[str, ...], tuple[str, ...], str | None] | None:
    """Default servers, variables sent and default key variable of the integrations biasim
    knows, as their source (langchain-openai 1.7, langchain-ollama 1.1, ollama 0.6) reads
    them; ``None`` for any other provider.

    ``api_key_env`` replaces the integration's own key variable (this backend passes its value
    as the key, or for ollama as the bearer token, which the client then does not overwrite).
    """
    env = os.environ.get
    if provider == "openai":
        url = env("OPENAI_API_BASE") or env("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return (url,), (key_env or DEFAULT_API_KEY_ENV,), DEFAULT_API_KEY_ENV
    if provider == "azure_openai":
        keys = (key_env,) if key_env else ("AZURE_OPENAI_API_KEY", DEFAULT_API_KEY_ENV)
        urls = tuple(u for u in (env("AZURE_OPENAI_ENDPOINT"),) if u)
        return urls, (*keys, "AZURE_OPENAI_AD_TOKEN"), None
    if provider == "ollama":
        url = env("OLLAMA_HOST") or OLLAMA_DEFAULT_HOST
        return (url,), (key_env or OLLAMA_KEY_ENV,), OLLAMA_KEY_ENV
    return None


def _to_langchain(messages: tuple[dict[str, str], ...]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    classes = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    converted = []
    for message in messages:
        cls = classes.get(message.get("role", ""))
        if cls is None:
            raise FatalBackendError(f"unsupported message role {message.get('role')!r}")
        converted.append(cls(content=message.get("content", "")))
    return converted


def _text_of(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks (Anthropic, Gemini, ...)
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return ""


def _length_cutoff(exc: BaseException) -> LLMResponse | None:
    """The answer cut off at ``max_tokens``, when the OpenAI SDK raised instead of returning it.

    langchain-openai parses structured answers with the SDK's ``parse``, which raises
    ``LengthFinishReasonError`` where ``create`` (the OpenAI backend) returns the text. The
    truncated text is an answer like any other: the engine validates it and may re-ask.
    """
    openai = sys.modules.get("openai")
    if openai is None or not isinstance(exc, openai.LengthFinishReasonError):
        return None
    completion = exc.completion
    try:
        text = completion.choices[0].message.content or ""
    except (AttributeError, IndexError):
        raise TransientError("malformed response body: no chat completion choice") from exc
    usage = getattr(completion, "usage", None)
    return LLMResponse(
        text=text,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        truncated=True,
    )
