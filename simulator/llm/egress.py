"""What a backend declares about its network traffic before it is built: the hosts it will
contact and the environment variables whose values travel with its requests.

Every backend registered in :data:`biasim.registry.BACKENDS` declares this through a callable
attribute ``egress(role) -> Egress`` on its factory (a classmethod on a backend class), which
reads only the role's settings and the environment: no import of a provider SDK, no
connection. The allow-list (:mod:`simulator.llm.allowlist`) checks the declaration before any
call, and the manifest records it as the run's real destinations.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    """One server a backend will contact.

    Attributes:
        url: The server (a URL, or ``HOST[:PORT]``), possibly with credentials (never shown).
        field: The role field that chose it (``options.base_url``,
            ``options.kwargs.openai_api_base``), or ``None`` when it is the backend's default
            or comes from the user's own environment (``OPENAI_BASE_URL``).
    """

    url: str
    field: str | None = None


@dataclass(frozen=True)
class Egress:
    """Where one role's requests go and which variables' values go with them.

    Attributes:
        hosts: The servers contacted; empty for a backend that makes no network call.
        env_vars: Environment variables whose values the backend sends (keys, tokens).
        key_field: The role field that chose a variable (``options.api_key_env``), or
            ``None`` when every variable is the backend's own.
        undeclared: Set when the backend cannot tell every host or variable (a LangChain
            provider biasim does not know, a plug-in without a declaration): the name the
            user trusts it by (``--trust-backend NAME``). Its ``env_vars`` are then a lower
            bound, so a loopback server gets no exemption.
    """

    hosts: tuple[Host, ...] = ()
    env_vars: tuple[str, ...] = ()
    key_field: str | None = None
    undeclared: str | None = None


#: The declaration of a backend that runs in this process and contacts nothing.
NO_EGRESS = Egress()
