"""Egress held per request and at the socket (issue 44, part 3): whatever a backend does after
it is built, no connection reaches a port the user did not allow -- a loopback listener at that
port counts every connection, and must count none."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from biasim.registry import BACKENDS
from biasim.simulator.cli import app
from biasim.simulator.llm.errors import EgressRefused, egress_refusal
from biasim.simulator.llm.netguard import EgressPolicy, entry, guarding
from biasim.simulator.llm.openai_backend import OpenAIBackend
from biasim.simulator.llm.openai_transport import AiohttpTransport
from biasim.simulator.llm.types import LLMRequest
from tests.loopback_llm_server import Fault, LoopbackLLMServer

KEY = "sk-egress-test-secret-0123456789"
PROMPT = "the prompt that must not leave"

STUDY = """\
name: egress_guard
description: where each request goes
roles:
  decider:
    backend: {backend}
    model: {model}
    max_attempts: 1
    options: {options}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: 1
"""


class CountingListener:
    """A loopback port nobody allowed: it accepts and counts every connection."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self.port = self._sock.getsockname()[1]
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.count += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def listener():
    counting = CountingListener()
    yield counting
    counting.close()


@pytest.fixture
def server():
    with LoopbackLLMServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OLLAMA_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OPENAI_ORG_ID", "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID", "OLLAMA_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


def _study(tmp_path: Path, backend: str, model: str, options: dict[str, Any]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(backend=backend, model=model, options=json.dumps(options)))
    return path


# ---- (a) a plug-in that swaps its transport after it is built -------------------------------


class _RawAiohttp:
    """A plug-in's own aiohttp session (not biasim's guarded one)."""

    def __init__(self, base: str) -> None:
        self._base = base

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        import aiohttp

        headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self._base + path, json=body, headers=headers) as response,
        ):
            return await response.read()

    async def aclose(self) -> None:
        return None


class _RawHttpx(_RawAiohttp):
    """A plug-in's own httpx client."""

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        import httpx

        headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
        async with httpx.AsyncClient() as client:
            response = await client.post(self._base + path, json=body, headers=headers)
            return response.content


class _RawSocket(_RawAiohttp):
    """A plug-in's blocking urllib call on a worker thread."""

    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes:
        request = urllib.request.Request(
            self._base + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"},
        )
        return await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=5).read())


def _swap(how: str, base: str) -> Any:
    if how == "biasim":  # biasim's own transport, aimed elsewhere
        return AiohttpTransport([base], os.environ["OPENAI_API_KEY"], lambda: None)
    return {"aiohttp": _RawAiohttp, "httpx": _RawHttpx, "socket": _RawSocket}[how](base)


class SwappingBackend(OpenAIBackend):
    """Built as the openai backend (its declaration and the allow-list hold), then replaces its
    transport with one aimed at a port nobody allowed, as the audit's plug-in did."""

    name = "swapping"

    def __init__(self, role: Any) -> None:
        super().__init__(role)
        port = os.environ["EGRESS_TEST_PORT"]
        self._transport = _swap(os.environ["EGRESS_TEST_HOW"], f"http://127.0.0.1:{port}/v1")


@pytest.fixture
def swapping() -> Any:
    BACKENDS.register("swapping", SwappingBackend)
    yield
    BACKENDS.unregister("swapping")


@pytest.mark.parametrize("how", ["biasim", "aiohttp", "httpx", "socket"])
def test_a_plugin_that_swaps_its_transport_after_init_reaches_no_unallowed_port(
    tmp_path: Path,
    server: LoopbackLLMServer,
    listener: CountingListener,
    cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    swapping: None,
    how: str,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("EGRESS_TEST_PORT", str(listener.port))
    monkeypatch.setenv("EGRESS_TEST_HOW", how)
    study = _study(tmp_path, "swapping", "m", {"base_url": server.openai_base_url})
    out = tmp_path / "run"
    allowed = f"127.0.0.1:{server.port}"
    result = cli.invoke(app, ["run", str(study), "--out", str(out), "--allow-endpoint", allowed])
    assert listener.count == 0
    assert server.requests == []  # the swapped transport never went to the allowed server
    assert result.exit_code == 3, result.output  # every call failed, none was sent
    where = f"127.0.0.1:{listener.port}"
    assert EgressRefused.MARK in result.stderr and where in result.stderr
    errors = {str(row.get("error")) for row in _rows(out)}
    assert all(EgressRefused.MARK in e and where in e for e in errors), errors
    written = [p.read_text("utf-8", "ignore") for p in out.rglob("*.json")]
    for text in (result.output, result.stderr, *written):
        assert KEY not in text


def _rows(out: Path) -> list[dict[str, Any]]:
    import pandas as pd

    return pd.read_parquet(out / "results.parquet").to_dict("records")


def test_the_same_plugin_reaches_a_port_the_user_allowed(
    tmp_path: Path,
    server: LoopbackLLMServer,
    cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    swapping: None,
) -> None:
    """The positive control: the guard refuses what is not allowed, not everything."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("EGRESS_TEST_PORT", str(server.port))
    monkeypatch.setenv("EGRESS_TEST_HOW", "socket")
    study = _study(tmp_path, "swapping", "m", {"base_url": server.openai_base_url})
    allowed = f"127.0.0.1:{server.port}"
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out), "--allow-endpoint", allowed])
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2


# ---- (b) a 307 to another loopback port, for every client biasim builds ---------------------


def _role(backend: str, model: str, **options: Any) -> Any:
    return SimpleNamespace(backend=backend, model=model, options=options, max_concurrency=None)


def _backend(client: str, base: str) -> Any:
    if client in ("aiohttp", "sdk"):
        return OpenAIBackend(_role("openai", "m", base_url=f"{base}/v1", transport=client))
    if client == "ollama":
        from biasim.simulator.llm.ollama_backend import OllamaBackend

        return OllamaBackend(_role("ollama", "m", host=base))
    from biasim.simulator.llm.langchain_backend import LangChainBackend

    if client == "langchain-openai":
        return LangChainBackend(_role("langchain", "openai:m", base_url=f"{base}/v1"))
    return LangChainBackend(_role("langchain", "ollama:m", base_url=base))


async def _generate(backend: Any) -> BaseException | None:
    request = LLMRequest(
        messages=({"role": "user", "content": PROMPT},),
        temperature=0.0,
        top_p=1.0,
        max_tokens=16,
        seed=1,
    )
    try:
        await backend.generate(request)
    except Exception as exc:
        return exc
    finally:
        await backend.aclose()
    return None


@pytest.mark.parametrize("guarded", [False, True], ids=["hooks", "hooks+socket"])
@pytest.mark.parametrize(
    "client", ["aiohttp", "sdk", "langchain-openai", "ollama", "langchain-ollama"]
)
def test_a_redirect_to_another_port_is_refused_and_never_followed(
    server: LoopbackLLMServer, listener: CountingListener, client: str, guarded: bool
) -> None:
    path = "/api/chat" if "ollama" in client else "/v1/chat/completions"
    target = f"http://127.0.0.1:{listener.port}{path}"
    server.set_default_fault(Fault.http_error(307, body="", headers={"Location": target}))
    backend = _backend(client, server.base_url)
    if guarded:
        policy = EgressPolicy([entry(f"127.0.0.1:{server.port}")])
        with guarding(policy):
            failure = asyncio.run(_generate(backend))
    else:
        failure = asyncio.run(_generate(backend))
    assert listener.count == 0
    assert failure is not None
    refused = egress_refusal(failure)
    assert refused is not None, repr(failure)
    assert f"127.0.0.1:{server.port}" in str(refused) and target in str(refused)
    assert "another origin" in str(refused)
    assert len(server.requests) == 1  # asked once, at the server the role names


def test_a_redirect_within_the_same_origin_is_not_refused_as_egress(
    server: LoopbackLLMServer,
) -> None:
    """The control: a same-origin redirect is followed by clients that follow (the SDK)."""
    server.enqueue(
        Fault.http_error(307, body="", headers={"Location": "/v1/chat/completions?again=1"})
    )
    backend = _backend("sdk", server.base_url)
    policy = EgressPolicy([entry(f"127.0.0.1:{server.port}")])
    with guarding(policy):
        failure = asyncio.run(_generate(backend))
    assert failure is None
    assert len(server.requests) == 2


# ---- (c) organisation and project headers ---------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "model", "extra"),
    [("openai", "m", {"transport": "sdk"}), ("langchain", "openai:m", {"structured": "none"})],
)
def test_org_and_project_ids_go_to_a_study_base_url_only_when_the_user_allows_it(
    tmp_path: Path,
    server: LoopbackLLMServer,
    cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    model: str,
    extra: dict[str, Any],
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-user-own")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_user_own")
    options = {"base_url": server.openai_base_url, **extra}
    study = _study(tmp_path, backend, model, options)
    # A loopback server a study chose needs no confirmation while no key would reach it.
    result = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    sent = [r.headers for r in server.requests]
    assert sent  # (free text may be asked again: the count is not the point)
    assert not any("openai-organization" in h or "openai-project" in h for h in sent), sent
    server.reset()
    allowed = f"127.0.0.1:{server.port}"
    args = ["run", str(study), "--out", str(tmp_path / "b"), "--allow-endpoint", allowed]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    sent = [r.headers for r in server.requests]
    assert {h.get("openai-organization") for h in sent} == {"org-user-own"}
    assert {h.get("openai-project") for h in sent} == {"proj_user_own"}


# ---- the guard itself ------------------------------------------------------------------------


def test_the_socket_guard_refuses_loopback_unless_allowed_and_is_gone_after(
    listener: CountingListener,
) -> None:
    notes: list[str] = []
    with guarding(EgressPolicy([entry("127.0.0.1:1")]), notes.append):
        for _ in range(2):
            with pytest.raises(EgressRefused, match=f"127.0.0.1:{listener.port}"):
                socket.create_connection(("127.0.0.1", listener.port), timeout=1)
        with pytest.raises(EgressRefused):
            socket.create_connection(("localhost", listener.port), timeout=1)
    assert listener.count == 0
    # Each refused address is said once, however often it is tried.
    assert len(notes) == len(set(notes)) and f"127.0.0.1:{listener.port}" in notes[0], notes
    socket.create_connection(("127.0.0.1", listener.port), timeout=1).close()
    # An allowed name lets through the addresses it resolves to, on its port only.
    with guarding(EgressPolicy([entry(f"localhost:{listener.port}")])):
        socket.create_connection(("localhost", listener.port), timeout=1).close()
    # ... also when the client resolved the name itself (its own resolver, e.g. aiodns).
    with guarding(EgressPolicy([entry(f"localhost:{listener.port}")])):
        socket.create_connection(("127.0.0.1", listener.port), timeout=1).close()
    _wait_for(lambda: listener.count == 3)


def test_the_socket_guard_holds_datagrams_too() -> None:
    """A datagram needs no connect: sendto and sendmsg are checked as they send."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            with guarding(EgressPolicy([entry("127.0.0.1:1")])):
                with pytest.raises(EgressRefused, match=f"127.0.0.1:{port}"):
                    sender.sendto(b"sk-secret", ("127.0.0.1", port))
                with pytest.raises(EgressRefused):
                    sender.sendto(b"sk-secret", 0, ("127.0.0.1", port))
                with pytest.raises(EgressRefused):
                    sender.sendmsg([b"sk-secret"], [], 0, ("127.0.0.1", port))
            with pytest.raises(TimeoutError):
                listener.recv(64)  # nothing arrived
            sender.sendto(b"after", ("127.0.0.1", port))  # the guard is gone with its run
            assert listener.recv(64) == b"after"


def _wait_for(condition: Any) -> None:
    import time

    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_plugins_guarded_aiohttp_session_refuses_a_redirect_it_would_follow(
    server: LoopbackLLMServer, listener: CountingListener
) -> None:
    """The session biasim hands plug-ins follows redirects as aiohttp does, except to another
    origin; under a guard it reaches no unallowed port even when asked directly."""
    from biasim.simulator.llm.netguard import guarded_session

    target = f"http://127.0.0.1:{listener.port}/v1/chat/completions"
    server.set_default_fault(Fault.http_error(307, body="", headers={"Location": target}))

    async def post(url: str) -> None:
        async with guarded_session() as session, session.post(url, json={"q": PROMPT}) as r:
            await r.read()

    with pytest.raises(EgressRefused, match="another origin"):
        asyncio.run(post(f"{server.openai_base_url}/chat/completions"))
    with (
        guarding(EgressPolicy([entry(f"127.0.0.1:{server.port}")])),
        pytest.raises(EgressRefused, match=f"a request to {target}"),
    ):
        asyncio.run(post(target))
    assert listener.count == 0 and len(server.requests) == 1
