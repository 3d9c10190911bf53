"""Egress checked per request and at the socket, whatever a backend does after it is built.

The allow-list (:mod:`simulator.llm.allowlist`) checks what each backend *declares*; this module
holds every request to it. A run's :class:`EgressPolicy` names the (host, port) pairs it may
reach: the hosts its roles declare (which the allow-list has passed), the hosts the user allowed
(``--allow-endpoint``, ``allow_endpoints``) and the user's own proxies. Two layers enforce it:

* **The HTTP clients biasim builds** (the lean aiohttp transport, the openai SDK's, LangChain's
  and Ollama's httpx clients) carry hooks -- :func:`guarded_session` for aiohttp,
  :func:`httpx_hooks` for httpx -- that check each request's URL and each redirect: a redirect
  to another origin (scheme, host, port) is refused outright, so a prompt or a key never
  follows one, and organisation and project headers (:data:`ORG_HEADERS`) are sent only to
  the provider's own host or a host the user allowed by name.
* **Every socket of the process** while a run's calls are in flight (:func:`guarding`):
  ``socket.socket.connect`` refuses any address the policy does not permit -- loopback
  included -- so a plug-in that swaps its transport, builds its own client or opens a socket
  itself reaches nothing the user did not allow. Names are matched as written; an address is
  permitted once an allowed name resolved to it in this process (``socket.getaddrinfo``).

A refusal raises :class:`~simulator.llm.errors.EgressRefused`, which the retry layer turns
into a final failure naming the host; the run also says it once per address. No message
holds a key: URLs are shown without user-info or query values.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import math
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from biasim.simulator.llm.allowlist import declarations, redact_url, user_config_path
from biasim.simulator.llm.errors import EgressRefused

#: Headers that name the user's organisation or project at a provider, and that provider's own
#: host: elsewhere they go only to a host the user allowed by name.
ORG_HEADERS = {"openai-organization": "api.openai.com", "openai-project": "api.openai.com"}
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: (host, port); a port of ``None`` allows every port of the host.
Entry = tuple[str, int | None]
Notify = Callable[[str], None]
_RESOLVE_EVERY_S = 60.0


def _normal_host(host: str) -> str:
    """A host as sockets and URLs both spell it: lower case, no brackets, zone or final dot,
    an IPv4-mapped IPv6 address as IPv4."""
    host = host.strip().strip("[]").split("%", 1)[0].rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


@functools.lru_cache(maxsize=1024)
def entry(url: str) -> Entry:
    """The (host, port) of ``url`` or ``HOST[:PORT]``; a URL without a port has its scheme's,
    a bare host without one allows every port."""
    has_scheme = "://" in url
    parts = urlsplit(url if has_scheme else f"//{url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and has_scheme:
        port = _DEFAULT_PORTS.get(parts.scheme.lower())
    return _normal_host(parts.hostname or ""), port


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _shown(host: str, port: int | None) -> str:
    name = f"[{host}]" if ":" in host else host
    return f"{name}:{port}" if port is not None else name


class EgressPolicy:
    """Where one run may connect.

    Args:
        entries: Every (host, port) it may reach.
        named: The ones the user allowed by name (organisation headers may go there too).
    """

    def __init__(self, entries: Iterable[Entry], named: Iterable[Entry] = ()) -> None:
        self.entries = frozenset(entries)
        self.named = frozenset(named)
        self._learned: set[Entry] = set()
        self._resolved_at = -math.inf
        #: Addresses refused so far, in order (each is reported once).
        self.refused: dict[str, None] = {}

    def permits(self, host: str, port: int | None) -> bool:
        """Whether ``host:port`` (as :func:`entry` spells it) is allowed, as written or as an
        address an allowed name has resolved to."""
        for known in (self.entries, self._learned):
            if (host, port) in known or (host, None) in known:
                return True
        return False

    def names(self, host: str, port: int | None) -> bool:
        """Whether the user allowed ``host:port`` by name."""
        return (host, port) in self.named or (host, None) in self.named

    def resolve_names(self) -> None:
        """Resolve every allowed name now, for a connection to an address no resolution in
        this process has shown (a client with its own resolver, e.g. aiodns): at most once a
        minute, so a refused address does not cost a lookup each time."""
        now = time.monotonic()
        if now - self._resolved_at < _RESOLVE_EVERY_S:
            return
        self._resolved_at = now
        for host, _ in self.entries:
            with contextlib.suppress(OSError, UnicodeError):
                self.learn(host, _REAL_GETADDRINFO(host, None, type=socket.SOCK_STREAM))

    def learn(self, name: str, infos: Iterable[Any]) -> None:
        """Record the addresses an allowed ``name`` resolved to (``getaddrinfo`` results)."""
        name = _normal_host(name)
        ports = [port for host, port in self.entries if host == name]
        for info in infos if ports else ():
            address = _normal_host(str(info[4][0]))
            self._learned.update((address, port) for port in ports)


def egress_policy(config: Any, allowed: Iterable[str]) -> EgressPolicy:
    """The policy of a study whose roles passed the allow-list: their declared hosts, the hosts
    the user allowed, and the proxies of the user's environment."""
    named = [entry(host.strip()) for host in allowed if host.strip()]
    hosts = [host for item in declarations(config) if item.egress for host in item.egress.hosts]
    declared = [entry(host.url) for host in hosts]
    proxy_urls = urllib.request.getproxies_environment()
    proxies = [entry(url) for scheme, url in proxy_urls.items() if scheme != "no"]
    return EgressPolicy([*declared, *named, *proxies], named)


# ---- the socket layer -------------------------------------------------------------------------

_lock = threading.Lock()
_active: list[tuple[EgressPolicy, Notify | None]] = []
_REAL_CONNECT = socket.socket.connect
_REAL_CONNECT_EX = socket.socket.connect_ex
_REAL_GETADDRINFO = socket.getaddrinfo
_REAL_SENDTO = socket.socket.sendto
_REAL_SENDMSG = socket.socket.sendmsg
_INET = (socket.AF_INET, socket.AF_INET6)


@contextlib.contextmanager
def guarding(policy: EgressPolicy, notify: Notify | None = None) -> Iterator[EgressPolicy]:
    """Hold every socket of this process to ``policy`` (and any other guard in force) while the
    block runs; ``notify`` hears each refused address once."""
    token = (policy, notify)
    with _lock:
        if not _active:
            socket.socket.connect = _connect  # type: ignore[method-assign]
            socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
            # A datagram needs no connect: its address is checked as it is sent.
            socket.socket.sendto = _sendto  # type: ignore[method-assign, assignment]
            socket.socket.sendmsg = _sendmsg  # type: ignore[method-assign]
            socket.getaddrinfo = _getaddrinfo
        _active.append(token)
    try:
        yield policy
    finally:
        with _lock:
            _active.remove(token)
            if not _active:
                del socket.socket.connect, socket.socket.connect_ex
                del socket.socket.sendto, socket.socket.sendmsg
                socket.getaddrinfo = _REAL_GETADDRINFO


def _connect(sock: socket.socket, address: Any) -> None:
    _check_address(sock, address)
    _REAL_CONNECT(sock, address)


def _connect_ex(sock: socket.socket, address: Any) -> int:
    _check_address(sock, address)
    return _REAL_CONNECT_EX(sock, address)


def _sendto(sock: socket.socket, data: Any, *args: Any) -> int:
    _check_address(sock, args[-1] if args else None)  # sendto(data[, flags], address)
    return _REAL_SENDTO(sock, data, *args)


def _sendmsg(sock: socket.socket, buffers: Any, *args: Any) -> int:
    _check_address(sock, args[2] if len(args) > 2 else None)  # (ancdata, flags, address)
    return _REAL_SENDMSG(sock, buffers, *args)


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    infos = _REAL_GETADDRINFO(host, port, *args, **kwargs)
    if host:
        name = host.decode("idna") if isinstance(host, bytes) else str(host)
        for policy, _ in list(_active):
            policy.learn(name, infos)
    return infos


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family not in _INET or not isinstance(address, tuple) or len(address) < 2:
        return
    host, port = _normal_host(str(address[0])), address[1]
    guards = list(_active)
    if not guards or any(policy.permits(host, port) for policy, _ in guards):
        return
    if _is_address(host):
        for policy, _ in guards:
            policy.resolve_names()
        if any(policy.permits(host, port) for policy, _ in guards):
            return
    where = _shown(host, port)
    message = (
        f"a connection to {where}, which no role of this study declares and the user has not "
        f"allowed (--allow-endpoint {where}, or allow_endpoints in {user_config_path()})"
    )
    _report(guards, where, message)
    raise EgressRefused(message)


def _report(guards: list[tuple[EgressPolicy, Notify | None]], where: str, message: str) -> None:
    for policy, notify in guards:
        if where not in policy.refused:
            policy.refused[where] = None
            if notify is not None:
                notify(f"{EgressRefused.MARK}: {message}")


# ---- the HTTP layer ---------------------------------------------------------------------------


def check_request(url: str, headers: MutableMapping[str, str] | None = None) -> None:
    """Refuse a request the guards in force do not permit (none in force: no refusal), and
    drop organisation headers ``url`` may not get.

    Raises:
        EgressRefused: ``url``'s host and port are not allowed.
    """
    host, port = entry(url)
    guards = list(_active)
    if guards and not any(policy.permits(host, port) for policy, _ in guards):
        where = _shown(host, port)
        message = (
            f"a request to {redact_url(url)}, whose server {where} no role of this study "
            f"declares and the user has not allowed (--allow-endpoint {where})"
        )
        _report(guards, where, message)
        raise EgressRefused(message)
    if headers is not None:
        for name, provider in ORG_HEADERS.items():
            if name in headers and host != provider and not _named(host, port):
                headers.pop(name, None)


def _named(host: str, port: int | None) -> bool:
    return any(policy.names(host, port) for policy, _ in list(_active))


def _origin(url: str) -> tuple[str, str, int | None]:
    host, port = entry(url)
    return urlsplit(url).scheme.lower(), host, port


def check_redirect(source: str, status: int, location: str) -> None:
    """Refuse a redirect from ``source`` to another origin (scheme, host or port), and a
    same-origin one the guards do not permit.

    Raises:
        EgressRefused: Naming both URLs.
    """
    target = urljoin(source, location)
    if _origin(target) != _origin(source):
        raise EgressRefused(
            f"{redact_url(source)} answered HTTP {status} with a redirect to "
            f"{redact_url(target)}, another origin; biasim follows no redirect to another "
            "origin, so neither the prompt nor a key went there"
        )
    check_request(target)


async def _on_httpx_request(request: Any) -> None:
    check_request(str(request.url), request.headers)


async def _on_httpx_response(response: Any) -> None:
    location = response.headers.get("location")
    if location and 300 <= response.status_code < 400:
        check_redirect(str(response.request.url), response.status_code, location)


def httpx_hooks() -> dict[str, list[Callable[[Any], Any]]]:
    """``event_hooks`` for an ``httpx`` (or ``httpx2``) ``AsyncClient``: each request and each
    redirect checked, organisation headers kept to where they may go."""
    return {"request": [_on_httpx_request], "response": [_on_httpx_response]}


def guard_httpx(client: Any) -> Any:
    """Add :func:`httpx_hooks` to an ``httpx``/``httpx2`` ``AsyncClient`` already built;
    returns it."""
    hooks = client.event_hooks
    client.event_hooks = {
        "request": [*hooks.get("request", []), _on_httpx_request],
        "response": [*hooks.get("response", []), _on_httpx_response],
    }
    return client


async def _on_aiohttp_start(session: Any, context: Any, params: Any) -> None:
    check_request(str(params.url), params.headers)


async def _on_aiohttp_redirect(session: Any, context: Any, params: Any) -> None:
    response = params.response
    check_redirect(str(params.url), response.status, response.headers.get("Location", ""))


def guarded_session(**kwargs: Any) -> Any:
    """An ``aiohttp.ClientSession`` (``kwargs`` as its own) whose every request and redirect
    is checked (see :func:`check_request`, :func:`check_redirect`)."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(_on_aiohttp_start)
    trace.on_request_redirect.append(_on_aiohttp_redirect)
    kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or ()), trace]
    return aiohttp.ClientSession(**kwargs)
