"""How the ``openai`` backend puts a request body on the wire: lean aiohttp or the official SDK.

Both transports post the same JSON body to ``<base_url><path>`` of one of a role's servers and
return the raw response bytes, raising the normalised errors of :mod:`simulator.llm.errors`, so
the backend, the retry layer and the fault tests treat them alike.

:class:`AiohttpTransport` (the default, ``transport: aiohttp``) keeps one pooled aiohttp session
for every server, URLs and headers built once, and bodies serialised with orjson. The SDK's
request machinery (option models, URL merging, the httpx-to-aiohttp shim) cost about 1.2 ms of
CPU a call, which capped one core near 800 calls/s. :class:`SdkTransport` (``transport: sdk``)
keeps the official client for servers or proxies that need its exact behaviour.
"""

from __future__ import annotations

import asyncio
import importlib
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import aiohttp
import orjson
import yarl

from biasim.simulator.llm.errors import BackendError
from biasim.simulator.llm.http_common import (
    SDK_TIMEOUT_S,
    clip_message,
    connection_error,
    error_for_status,
    map_body_error,
    map_openai_error,
    redact,
)
from biasim.simulator.llm.netguard import check_redirect, check_request, httpx_hooks

#: Connect timeout of the lean transport (the retry layer's per-attempt timeout is the real
#: bound on a call; this only stops a black-holed SYN from holding a slot for the backstop).
CONNECT_TIMEOUT_S = 30.0


class Transport(Protocol):
    """Posts a JSON body to one of a role's servers."""

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        """POST ``body`` to ``path`` under server number ``server``; the raw 2xx answer.

        Raises:
            BackendError: Normalised failure.
        """
        ...

    async def aclose(self) -> None:
        """Close connections."""
        ...


class AiohttpTransport:
    """One aiohttp session for every server of a role.

    Args:
        base_urls: The servers' base URLs (``.../v1``).
        api_key: Sent as a bearer token.
        secret: Returns the key to scrub from error messages (read at error time, so no error
            path keeps it).
        auth: Headers that carry the key instead of the bearer token (a provider with its own
            scheme, e.g. Anthropic's ``x-api-key``).
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        api_key: str,
        secret: Callable[[], str | None],
        auth: dict[str, str] | None = None,
    ) -> None:
        self._bases = [yarl.URL(url) for url in base_urls]
        self._urls: dict[tuple[int, str], yarl.URL] = {}
        self._text: dict[yarl.URL, str] = {}
        # Proxies as the SDK's httpx client would take them from the environment, resolved
        # once per server instead of on every request.
        self._proxies = [_env_proxy(str(base)) for base in self._bases]
        self._headers = {
            **(auth if auth is not None else {"Authorization": f"Bearer {api_key}"}),
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._secret = secret
        self._session: aiohttp.ClientSession | None = None

    def _url(self, server: int, path: str) -> yarl.URL:
        url = self._urls.get((server, path))
        if url is None:
            base = self._bases[server]
            # with_path keeps a query the server needs (e.g. an api-version); it drops none.
            url = base.with_path(base.path.rstrip("/") + path, keep_query=True)
            self._urls[(server, path)] = url
            self._text[url] = str(url)
        return url

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use: a session belongs to the event loop that runs the study.
        self._session = aiohttp.ClientSession(
            # The concurrency bound is the retry layer's limiter; a connector limit below it
            # would queue requests invisibly (aiohttp's default is 100).
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            # No read timeout: the retry layer's per-attempt timeout bounds every call (and a
            # cancelled request closes its connection); a per-read timer would cost a timer
            # handle on every chunk of every answer.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            headers=self._headers,
        )
        return self._session

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        """POST ``body`` (serialised with orjson) and return the raw 2xx answer.

        Raises:
            BackendError: HTTP error statuses (with ``Retry-After``), connection failures with
                their reason, bodies cut short.
        """
        return await self._send("POST", server, path, orjson.dumps(body))

    async def get(self, server: int, path: str) -> bytes:
        """GET ``path`` under server number ``server`` (a batch's state or results file).

        Raises:
            BackendError: As :meth:`post`.
        """
        return await self._send("GET", server, path)

    async def post_file(
        self, server: int, path: str, fields: dict[str, str], content: bytes
    ) -> bytes:
        """POST a multipart form: ``fields`` and one JSONL ``file`` (a batch's input).

        Raises:
            BackendError: As :meth:`post`.
        """
        form = aiohttp.FormData()
        for name, value in fields.items():
            form.add_field(name, value)
        form.add_field("file", content, filename="batch.jsonl", content_type="application/jsonl")
        payload = form()
        # The session's JSON content type would mislabel the form: name the form's own.
        return await self._send("POST", server, path, payload, payload.content_type)

    async def _send(
        self, method: str, server: int, path: str, data: Any = None, content_type: str = ""
    ) -> bytes:
        """One request; ``content_type`` replaces the session's JSON one (a multipart form)."""
        session = self._session or self._open()
        headers = {"Content-Type": content_type} if content_type else None
        url = self._url(server, path)
        try:
            # Checked here rather than by a trace config on the session: tracing costs every
            # request a signal per chunk, and this transport follows no redirect.
            check_request(self._text[url])
            async with session.request(
                method,
                url,
                data=data,
                headers=headers,
                proxy=self._proxies[server],
                # As the SDK: a redirected POST would reach the server as a GET.
                allow_redirects=False,
            ) as response:
                raw = await response.read()
                location = response.headers.get("Location")
                if 300 <= response.status < 400 and location:
                    # Not followed; one to another origin is refused by name, not as a status.
                    check_redirect(str(response.url), response.status, location)
                if response.status >= 300:
                    raise _status_error(response.status, raw, response.headers, self._secret())
                return raw
        except BackendError:
            raise
        except (aiohttp.ClientError, OSError) as exc:
            # A connect timeout is a TimeoutError too, but not the retry layer's: it is mapped
            # here like any other failed connection.
            raise connection_error(exc, self._secret()) from exc

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class SdkTransport:
    """``openai.AsyncOpenAI`` (one client per server) on its raw-request path.

    Args:
        base_urls: The servers' base URLs; ``None`` means the SDK's hosted default.
        api_key: The key.
        secret: Returns the key to scrub from error messages.
    """

    def __init__(
        self, base_urls: Sequence[str | None], api_key: str, secret: Callable[[], str | None]
    ) -> None:
        import openai

        self._clients = [
            openai.AsyncOpenAI(
                base_url=url,
                api_key=api_key,
                max_retries=0,  # the retry layer is the only one that retries
                timeout=SDK_TIMEOUT_S,
                # aiohttp's connection pool: httpcore's scans every connection for every
                # request, which capped a 64-way study near 70 % of what the server could give.
                http_client=openai.DefaultAioHttpClient(
                    timeout=SDK_TIMEOUT_S, event_hooks=httpx_hooks()
                ),
            )
            for url in base_urls
        ]
        self._secret = secret
        # `cast_to` must be the Response class of the HTTP library this SDK release is built
        # on: httpx up to 2.x, httpx2 from 3.x.
        sdk_http = importlib.import_module("openai._base_client")
        self._response_type = (getattr(sdk_http, "httpx2", None) or sdk_http.httpx).Response

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        """POST through the SDK and return the raw 2xx answer.

        Raises:
            BackendError: The SDK's error, normalised (see :func:`map_openai_error`).
        """
        try:
            # The SDK's documented raw-request path: its client, auth, timeouts and error
            # classes, without re-walking every parameter through TypedDict transforms and
            # building pydantic models. The body is already in the wire format.
            raw = await self._clients[server].post(path, body=body, cast_to=self._response_type)
        except Exception as exc:
            mapped = map_openai_error(exc, self._secret()) or map_body_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        return raw.content

    async def aclose(self) -> None:
        """Close every client's connection pool."""
        await asyncio.gather(*(client.close() for client in self._clients))


def _status_error(status: int, raw: bytes, headers: Any, secret: str | None) -> BackendError:
    """The normalised error for an error status, quoting the server's own message."""
    detail = raw.decode("utf-8", "replace")
    try:
        error = orjson.loads(raw).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        code = error.get("code") or error.get("type")
        detail = f"{error['message']}" + (f" ({code})" if code else "")
    elif isinstance(error, str):
        detail = error
    message = redact(clip_message(f"HTTP {status}: {detail}"), secret)
    return error_for_status(status, message, headers)


def _env_proxy(url: str) -> str | None:
    """The proxy the environment sets for ``url`` (``HTTPS_PROXY``, ``NO_PROXY`` ...), if any."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    if urllib.request.proxy_bypass_environment(host):
        return None
    return urllib.request.getproxies_environment().get(scheme)
