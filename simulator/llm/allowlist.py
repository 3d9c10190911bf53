"""Where a study may send requests and keys: only where the user, not the study file, says.

A study file is often someone else's. It may choose a server (``options.base_url``, Ollama's
``options.host``) and the environment variable a key is read from (``options.api_key_env``), so
without a check a colleague's file could send ``OPENAI_API_KEY`` -- or any variable it names --
to any host. A role passes when its destination is the backend's default (or the user's own
``OPENAI_BASE_URL`` / ``OLLAMA_HOST``) with the backend's default key variable, or when the user
allowed the host with ``--allow-endpoint HOST`` or ``allow_endpoints`` in their own config file
(``$BIASIM_CONFIG``, else ``~/.config/biasim/config.toml``). A loopback server chosen by the study
needs no confirmation while no key would reach it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.llm.anthropic_backend import ANTHROPIC_DEFAULT_HOST, ANTHROPIC_KEY_ENV

OPENAI_KEY_ENV = "OPENAI_API_KEY"
OLLAMA_KEY_ENV = "OLLAMA_API_KEY"
OPENAI_DEFAULT_HOST = "api.openai.com"
OLLAMA_DEFAULT_HOST = "localhost:11434"
CONFIG_ENV = "BIASIM_CONFIG"
_REDACTED = "***"
# A URL with user-info or a query inside free text (an SDK's error message, a log line).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


@dataclass(frozen=True)
class Destination:
    """Where one role's requests go and which key variable travels with them.

    Attributes:
        path: Field path of the role (or model variant) in the study.
        backend: Backend name.
        url: The server as the study wrote it, or ``None`` when the study chose none.
        key_env: Key variable the study named, or ``None`` for the backend's default.
        key_vars: Every variable whose value the backend would send.
    """

    path: tuple[str | int, ...]
    backend: str
    url: str | None
    key_env: str | None
    key_vars: tuple[str, ...]


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
    path = user_config_path()
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError([Problem(str(path), None, "", f"unreadable config: {exc}")]) from None
    hosts = data.get("allow_endpoints", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise InputError(
            [Problem(str(path), None, "allow_endpoints", "must be a list of host names")]
        )
    return hosts


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


def destinations(config: Any) -> Iterator[Destination]:
    """Every network role and model variant of a validated study, with what it sends where."""
    for name, role in config.roles.items():
        for j, variant in enumerate(role.variants().values()):
            at = ("roles", name, "models", j) if role.models else ("roles", name)
            found = _destination(at, variant.backend, str(variant.model or ""), variant.options)
            if found is None:
                continue
            # A role may list several servers (`base_url: [...]`): each is a destination.
            urls = found.url if isinstance(found.url, list) else [found.url]
            for url in urls:
                yield dataclasses.replace(found, url=url and str(url))


def _destination(
    path: tuple[str | int, ...], backend: str, model: str, options: dict[str, Any]
) -> Destination | None:
    named = options.get("api_key_env")
    key_env = str(named) if named else None
    if backend == "openai":
        url = options.get("base_url")
        own = key_env if key_env != OPENAI_KEY_ENV else None
        return Destination(path, backend, url or None, own, (key_env or OPENAI_KEY_ENV,))
    if backend == "anthropic":
        url = options.get("base_url")
        own = key_env if key_env != ANTHROPIC_KEY_ENV else None
        return Destination(path, backend, url or None, own, (key_env or ANTHROPIC_KEY_ENV,))
    if backend == "ollama":
        url = options.get("host")
        return Destination(path, backend, url and str(url), None, (OLLAMA_KEY_ENV,))
    if backend == "langchain":
        url = options.get("base_url")
        default = OPENAI_KEY_ENV if model.lower().startswith("openai:") else None
        keys = tuple(k for k in (key_env or default,) if k)
        # Only the openai provider has a default variable; any other named one is the study's.
        return Destination(
            path, backend, url and str(url), key_env if key_env != default else None, keys
        )
    return None


def _default_url(dest: Destination) -> str:
    if dest.backend == "ollama":
        return os.environ.get("OLLAMA_HOST") or OLLAMA_DEFAULT_HOST
    if dest.backend == "anthropic":
        return ANTHROPIC_DEFAULT_HOST
    return os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_HOST


def endpoint_problems(config: Any, smap: SourceMap, allowed: Iterable[str]) -> list[Problem]:
    """Roles that would send requests or a key somewhere the user has not allowed.

    Args:
        config: A validated study.
        smap: Where its fields were written.
        allowed: Hosts from ``--allow-endpoint`` and the user's config file.

    Returns:
        One problem per role or variant, naming the host and how to allow it.
    """
    allowed = list(allowed)
    problems = []
    for dest in destinations(config):
        url = dest.url or _default_url(dest)
        if is_allowed(url, allowed):
            continue
        host, port = _host_port(url)
        shown = f"{host}:{port}" if port else host
        sent = [k for k in dest.key_vars if os.environ.get(k)]
        how = (
            f"confirm with --allow-endpoint {shown} (or add it to allow_endpoints in "
            f"{user_config_path()})"
        )
        if dest.key_env is not None and dest.key_env in sent:
            problems.append(
                smap.problem(
                    (*dest.path, "options", "api_key_env"),
                    f"the study sends the value of environment variable {dest.key_env} to "
                    f"{shown}; a study file may not choose which key goes where: {how}",
                )
            )
        elif dest.url is not None and not (_is_loopback(host) and not sent):
            what = f" with the key in {', '.join(sent)}" if sent else ""
            field = "host" if dest.backend == "ollama" else "base_url"
            problems.append(
                smap.problem(
                    (*dest.path, "options", field),
                    f"the study sends its requests{what} to {shown}, which is not the "
                    f"backend's default: {how}",
                )
            )
    return problems


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


def redact_study(data: Any) -> Any:
    """A copy of a study document with every server URL's credentials redacted."""
    if isinstance(data, dict):
        return {
            k: redact_url(v)
            if k in ("base_url", "host") and isinstance(v, str)
            else [redact_url(u) if isinstance(u, str) else u for u in v]
            if k == "base_url" and isinstance(v, list)
            else redact_study(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_study(v) for v in data]
    return data
