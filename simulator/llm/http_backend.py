"""Any JSON-over-HTTP decision tool (a vendor's résumé scorer, an in-house ranking service).

Each call POSTs one JSON body, rendered from the role's ``body`` template over the call's
``document``, ``system`` and ``fields`` (see :mod:`simulator.llm.decision_tools`), to the role's
``url``; the reply's fields are read at the paths of ``response``. Headers name environment
variables only, so the study file never holds a key; their values are read when the backend is
built and never enter its identity (the cache key and the manifest), a log or an error message.
Statuses and failed connections map to the same errors as every HTTP backend (429/503 wait for
``Retry-After``, 5xx are retried, other 4xx are final), so the retry layer, rate limits, the
call store, resume and replay treat a decision tool like a model.

The body template is compiled by the study's sandbox, which lives in a layer above this one:
the registered factory (``simulator.study.tool_backends``) hands its compiler in.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from biasim.simulator.llm.answer_paths import parse_mapping
from biasim.simulator.llm.decision_tools import mapping_identity, tool_answer, tool_inputs
from biasim.simulator.llm.egress import Egress, Host
from biasim.simulator.llm.errors import BackendConfigError, BackendError, FatalBackendError
from biasim.simulator.llm.http_common import check_options, clip_message, option_str, public_url
from biasim.simulator.llm.openai_transport import AiohttpTransport
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: The body when the role gives none: the document and its fields.
DEFAULT_BODY = '{"document": {{ document | tojson }}, "fields": {{ fields | tojson }}}'
_OPTIONS = {"url", "body", "headers", "response"}
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_SCHEME = re.compile(r"[A-Za-z]{1,16}")
#: Headers the backend sets itself.
_OWN_HEADERS = frozenset({"content-type", "accept", "content-length", "host"})

#: Compiles a body template: source -> render(context) -> text.
BodyCompiler = Callable[[str], Callable[[dict[str, Any]], str]]


@dataclass(frozen=True)
class HeaderSource:
    """A header's value: an environment variable's, after an optional scheme (``Bearer``)."""

    env: str
    scheme: str | None = None

    def value(self) -> str | None:
        """The header's value now, or ``None`` when the variable is unset."""
        secret = os.environ.get(self.env)
        if not secret:
            return None
        return f"{self.scheme} {secret}" if self.scheme else secret


def parse_headers(value: Any) -> dict[str, HeaderSource]:
    """The ``headers`` option: header name -> ``ENV_VAR`` or ``{env: ENV_VAR, scheme: Bearer}``.

    Raises:
        BackendConfigError: Anything but variable names (a literal value may be a secret).
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BackendConfigError(
            "must map header names to environment variables, e.g. `{X-Api-Key: SCORER_KEY}`",
            field="options.headers",
        )
    headers: dict[str, HeaderSource] = {}
    for name, source in value.items():
        at = f"options.headers.{name}"
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise BackendConfigError(f"`{name}` is not an HTTP header name", field=at)
        if name.lower() in _OWN_HEADERS:
            raise BackendConfigError(f"the http backend sets `{name}` itself", field=at)
        env, scheme = (
            (source, None) if not isinstance(source, Mapping) else _env_and_scheme(source, at)
        )
        if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
            raise BackendConfigError(
                "must name an environment variable (upper-case letters, digits and `_`, e.g. "
                "SCORER_KEY), never hold a value: a study file may not contain a key",
                field=at,
            )
        headers[name] = HeaderSource(env, scheme)
    return headers


def _env_and_scheme(source: Mapping[str, Any], at: str) -> tuple[Any, str | None]:
    if set(source) - {"env", "scheme"} or "env" not in source:
        raise BackendConfigError("takes `env` (a variable name) and optionally `scheme`", field=at)
    scheme = source.get("scheme")
    if scheme is not None and (not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme)):
        raise BackendConfigError(
            "`scheme` is one word of letters, e.g. Bearer", field=f"{at}.scheme"
        )
    return source["env"], scheme


def tool_url(options: Mapping[str, Any]) -> str:
    """The ``url`` option, checked: an http(s) URL without credentials, written in the study or
    ``{env: VAR, default: URL}``: the value of ``VAR`` when set (a tool whose address is known
    only where it runs, such as a loopback server on a free port), else ``default``.

    Raises:
        BackendConfigError: Absent, or not such a URL.
    """
    url = _env_url(options["url"]) if isinstance(options.get("url"), Mapping) else None
    url = url or option_str(options, "url")
    if url is None or not re.match(r"https?://[^/\s@]+", url):
        raise BackendConfigError(
            "the http backend needs `url`, the tool's http(s) endpoint "
            "(e.g. http://127.0.0.1:8080/score)",
            field="options.url",
        )
    return url


def _env_url(source: Mapping[str, Any]) -> str:
    """The URL of ``{env: VAR, default: URL}``."""
    env, default = source.get("env"), source.get("default")
    if set(source) - {"env", "default"} or not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise BackendConfigError(
            "write a URL, or {env: VARIABLE, default: URL} with an upper-case variable name",
            field="options.url",
        )
    url = os.environ.get(env) or default
    if not isinstance(url, str) or not url:
        raise BackendConfigError(f"{env} is not set and there is no `default`", field="options.url")
    return url


class HttpBackend:
    """POST a rendered JSON body to a decision tool and read its answer at the mapped paths.

    Options:
        url: The endpoint (required).
        body: Jinja template of the JSON body over ``document``, ``system`` and ``fields``
            (default: ``{"document": ..., "fields": ...}``).
        headers: Header name -> environment variable (or ``{env, scheme}``).
        response: Output field -> path in the reply; default: the reply is the answer.
    """

    name = "http"
    synthetic = False
    reasks = False
    default_concurrency = 8

    def __init__(self, role: Any, compile_body: BodyCompiler) -> None:
        options = dict(role.options)
        check_options(options, _OPTIONS, self.name)
        self.url = tool_url(options)
        self.body_source = option_str(options, "body", DEFAULT_BODY) or DEFAULT_BODY
        self._render = compile_body(self.body_source)
        self.mapping = parse_mapping(options.get("response"), "options.response")
        self._headers = parse_headers(options.get("headers"))
        values = {}
        for header, source in self._headers.items():
            value = source.value()
            if value is None:
                raise BackendConfigError(
                    f"environment variable {source.env} is not set; export the key for "
                    f"{public_url(self.url)} there",
                    field=f"options.headers.{header}",
                )
            values[header] = value
        self.model = str(role.model or public_url(self.url))
        self.base_url = public_url(self.url) or self.url
        self._transport = AiohttpTransport([self.url], "", self._secret, auth=values)

    @classmethod
    def egress(cls, role: Any) -> Egress:
        """The tool's URL (chosen by the study) and the variables its headers send."""
        options = dict(role.options)
        check_options(options, _OPTIONS, cls.name)
        headers = parse_headers(options.get("headers"))
        parse_mapping(options.get("response"), "options.response")
        env_vars = tuple(dict.fromkeys(source.env for source in headers.values()))
        return Egress(
            (Host(tool_url(options), "options.url"),),
            env_vars,
            "options.headers" if env_vars else None,
        )

    def identity(self) -> dict[str, Any]:
        """URL, body template, mapping and the header names (never their values)."""
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "body": self.body_source,
            "response": mapping_identity(self.mapping),
            "headers": sorted(self._headers),
            # The shown URL drops its query, whose values may be private: a digest of the
            # whole URL keeps `?version=2` and `?version=3` apart in the cache.
            "url_sha256": hashlib.sha256(self.url.encode()).hexdigest()[:16],
        }

    async def generate(self, request: LLMRequest) -> LLMResponse:
        """One POST to the tool.

        Raises:
            BackendError: Normalised failure (the body, the status or the reply).
        """
        try:
            text = self._render(tool_inputs(request).context())
        except Exception as exc:  # the sandbox's refusals and undefined names alike
            raise FatalBackendError(
                f"the body template failed: {type(exc).__name__}: {clip_message(str(exc))}"
            ) from None
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise FatalBackendError(
                f"the body template did not render JSON ({exc}); write strings with "
                "`{{ document | tojson }}`"
            ) from None
        try:
            raw = await self._transport.post(0, "", body)
        except BackendError as exc:
            raise type(exc)(self._scrub(str(exc)), retry_after=exc.retry_after) from None
        try:
            reply = orjson.loads(raw)
        except orjson.JSONDecodeError:
            shown = clip_message(raw[:200].decode("utf-8", "replace"))
            raise FatalBackendError(
                f"the tool's reply is not JSON: {self._scrub(shown)!r}"
            ) from None
        return tool_answer(reply, self.mapping)

    def _secret(self) -> str | None:
        # One value for the transport's own scrubbing; _scrub masks every header's.
        return next((v for s in self._headers.values() if (v := os.environ.get(s.env))), None)

    def _scrub(self, text: str) -> str:
        for source in self._headers.values():
            secret = os.environ.get(source.env)
            if secret:
                text = text.replace(secret, "***")
        return text

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._transport.aclose()
