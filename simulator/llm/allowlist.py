"""Where a study may send requests and keys: only where the user, not the study file, says.

A study file is often someone else's. It may choose a server (``options.base_url``, Ollama's
``options.host``) and the environment variable a key is read from (``options.api_key_env``), so
without a check a colleague's file could send ``OPENAI_API_KEY`` -- or any variable it names --
to any host. A role passes when its destination is the backend's default (or the user's own
``OPENAI_BASE_URL`` / ``OLLAMA_HOST``) with the backend's default key variable, or when the user
allowed the host with ``--allow-endpoint HOST`` or ``allow_endpoints`` in their own config file
(``$BIASIM_CONFIG``, else ``~/.config/biasim/config.toml``). A loopback server chosen by the study
needs no confirmation while no key would reach it.

What a role sends where is the backend's own declaration (:mod:`simulator.llm.egress`), read
from its registration before anything is built, so built-in, LangChain and plug-in backends
pass the same check; a backend that cannot declare runs only when the user trusts it
(``--trust-backend NAME``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from biasim.registry import BACKENDS, MissingExtra, UnknownPlugin
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.llm.egress import NO_EGRESS, Egress
from biasim.simulator.llm.errors import BackendConfigError

CONFIG_ENV = "BIASIM_CONFIG"
_REDACTED = "***"
# A URL with user-info or a query inside free text (an SDK's error message, a log line).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def user_config_path() -> Path:
    """The user's own config file: ``$BIASIM_CONFIG``, else ``~/.config/biasim/config.toml``."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "biasim" / "config.toml"


def user_allowed_hosts() -> list[str]:
    """``allow_endpoints`` from the user's config file (empty when the file is absent).

    Raises:
        InputError: The file exists but is not TOML with a list of host strings there.
    """
    return _user_config_list("allow_endpoints", "host names")


def user_trusted_backends() -> list[str]:
    """``trust_backends`` from the user's config file (backends let run undeclared).

    Raises:
        InputError: The file exists but is not TOML with a list of names there.
    """
    return _user_config_list("trust_backends", "backend names")


def _user_config_list(key: str, what: str) -> list[str]:
    path = user_config_path()
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError([Problem(str(path), None, "", f"unreadable config: {exc}")]) from None
    values = data.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InputError([Problem(str(path), None, key, f"must be a list of {what}")])
    return values


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or "").lower(), port


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_allowed(url: str, allowed: Iterable[str]) -> bool:
    """Whether the user allowed ``url``'s host (``HOST`` allows every port, ``HOST:PORT`` one)."""
    host, port = _host_port(url)
    for entry in allowed:
        want_host, want_port = _host_port(entry.strip())
        if want_host == host and (want_port is None or want_port == port):
            return True
    return False


@dataclass(frozen=True)
class Declared:
    """One role (or model variant) of a study and what its backend declared.

    Attributes:
        path: Field path of the role or variant in the study.
        backend: Backend name.
        egress: The declaration, or ``None`` for a backend that makes none.
        error: Why the declaration could not be made (a bad option), with the field at fault.
    """

    path: tuple[str | int, ...]
    backend: str
    egress: Egress | None
    error: BackendConfigError | None = None


def declared_egress(role: Any) -> Egress | None:
    """What the backend of ``role`` declares (``egress(role)`` on its registered factory).

    Returns:
        The declaration; ``None`` for a backend that declares nothing, or one that cannot be
        loaded here (unknown, or its extra is not installed: validation says so).

    Raises:
        BackendConfigError: The role's options make no valid declaration.
    """
    try:
        factory = BACKENDS.load(role.backend)
    except (UnknownPlugin, MissingExtra):
        return NO_EGRESS
    declare = getattr(factory, "egress", None)
    if declare is None:
        return None
    egress = declare(role)
    if not isinstance(egress, Egress):
        return None
    return egress


def declarations(config: Any) -> Iterator[Declared]:
    """Every role and model variant of a validated study with its backend's declaration."""
    for name, role in config.roles.items():
        for j, variant in enumerate(role.variants().values()):
            at = ("roles", name, "models", j) if role.models else ("roles", name)
            try:
                yield Declared(at, variant.backend, declared_egress(variant))
            except BackendConfigError as exc:
                yield Declared(at, variant.backend, None, exc)


def endpoint_problems(
    config: Any, smap: SourceMap, allowed: Iterable[str], trusted: Iterable[str] = ()
) -> list[Problem]:
    """Roles that would send requests or a key somewhere the user has not allowed.

    Args:
        config: A validated study.
        smap: Where its fields were written.
        allowed: Hosts from ``--allow-endpoint`` and the user's config file.
        trusted: Backends the user lets run without a complete declaration
            (``--trust-backend``, ``trust_backends`` in the config file).

    Returns:
        One problem per role, variant or host, naming the host and how to allow it.
    """
    allowed, trusted = list(allowed), set(trusted)
    problems = []
    for item in declarations(config):
        if item.error is not None:
            field = item.error.field.split(".") if item.error.field else ()
            problems.append(smap.problem((*item.path, *field), str(item.error)))
            continue
        undeclared = item.backend if item.egress is None else item.egress.undeclared
        if undeclared is not None and undeclared not in trusted:
            problems.append(smap.problem((*item.path, "backend"), _undeclared(undeclared)))
        if item.egress is not None:
            problems += _host_problems(item.path, item.egress, smap, allowed)
    return problems


def _undeclared(name: str) -> str:
    return (
        f"`{name}` does not declare the hosts it contacts and the environment variables it "
        f"sends, so biasim cannot check where keys go: run it with --trust-backend {name} "
        f"(or add it to trust_backends in {user_config_path()}) if you trust it"
    )


def _host_problems(
    path: tuple[str | int, ...], egress: Egress, smap: SourceMap, allowed: list[str]
) -> list[Problem]:
    problems = []
    sent = [k for k in egress.env_vars if os.environ.get(k)]
    for host in egress.hosts:
        if is_allowed(host.url, allowed):
            continue
        name, port = _host_port(host.url)
        shown = f"{name}:{port}" if port else name
        how = (
            f"confirm with --allow-endpoint {shown} (or add it to allow_endpoints in "
            f"{user_config_path()})"
        )
        # A loopback server gets no key when none is set, unless the variables are not known.
        harmless = _is_loopback(name) and not sent and egress.undeclared is None
        if egress.key_field is not None and sent:
            problems.append(
                smap.problem(
                    (*path, *egress.key_field.split(".")),
                    f"the study sends the value of environment variable {', '.join(sent)} to "
                    f"{shown}; a study file may not choose which key goes where: {how}",
                )
            )
        elif host.field is not None and not harmless:
            what = f" with the key in {', '.join(sent)}" if sent else ""
            problems.append(
                smap.problem(
                    (*path, *host.field.split(".")),
                    f"the study sends its requests{what} to {shown} (chosen by {host.field}), "
                    f"which is not the backend's default: {how}",
                )
            )
    return problems


def undeclared_servers(backend: Any, role: Any) -> list[str]:
    """Servers a built backend says it uses (``base_url`` or ``host``) that its declaration for
    ``role`` does not name: a plug-in that inherits a declaration and connects elsewhere."""
    servers = getattr(backend, "base_url", None) or getattr(backend, "host", None)
    egress = declared_egress(role)
    if not servers or egress is None:
        return []
    declared = {_host_port(host.url) for host in egress.hosts}
    listed = servers if isinstance(servers, list) else [servers]
    return [str(url) for url in listed if _host_port(str(url)) not in declared]


def destinations(config: Any) -> dict[str, dict[str, list[str]]]:
    """Per role, the hosts it contacts (credentials redacted) and the variables it sends, as the
    manifest records them."""
    found: dict[str, dict[str, list[str]]] = {}
    for item in declarations(config):
        if item.egress is None:
            continue
        key = ".".join(str(p) for p in item.path[1:])
        found[key] = {
            "hosts": [redact_url(host.url) for host in item.egress.hosts],
            "env_vars": list(item.egress.env_vars),
        }
    return found


def redact_url(url: str) -> str:
    """``url`` with any user-info and query values replaced by ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return _REDACTED
    if not host or (not parts.username and not parts.password and not parts.query):
        return url
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    if parts.username or parts.password:
        netloc = f"{_REDACTED}@{netloc}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, _REDACTED) for k, _ in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL inside ``text`` with its credentials redacted (see :func:`redact_url`)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def redact_study(data: Any, *, in_options: bool = False) -> Any:
    """A copy of a study document (or a backend identity) with every server URL's credentials
    redacted: ``base_url`` and ``host`` anywhere, and every URL inside a role's ``options``
    (a LangChain ``kwargs`` alias); URLs in prompts and other text are left as written."""
    if isinstance(data, dict):
        return {
            k: redact_url(v)
            if isinstance(v, str) and (in_options or k in ("base_url", "host"))
            else redact_study(v, in_options=in_options or k in ("options", "kwargs", "base_url"))
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_study(v, in_options=in_options) for v in data]
    if isinstance(data, str) and in_options:
        return redact_url(data)
    return data
