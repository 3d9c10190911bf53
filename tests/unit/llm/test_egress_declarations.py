"""One egress rule: every backend declares the hosts it contacts and the variables it sends, and
the allow-list checks that declaration before any call -- LangChain kwargs and plug-ins too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from biasim.registry import BACKENDS
from biasim.simulator.cli import app
from biasim.simulator.llm.allowlist import endpoint_problems
from biasim.simulator.llm.langchain_backend import _SERVER_KEY
from biasim.simulator.llm.openai_backend import OpenAIBackend
from biasim.simulator.study.load import load_study
from tests.loopback_llm_server import LoopbackLLMServer

STUDY = """\
name: egress_study
description: where each backend sends requests
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

#: Every kwargs field (name or alias) of the installed integrations that chooses a server,
#: as their classes define it (checked below), and aliases other providers use.
INSTALLED_ALIASES = {
    ("openai", "openai_api_base"),  # ChatOpenAI.openai_api_base
    ("openai", "openai_proxy"),  # ChatOpenAI.openai_proxy
    ("azure_openai", "azure_endpoint"),  # AzureChatOpenAI.azure_endpoint
    ("azure_openai", "openai_api_base"),
}
OTHER_ALIASES = ["api_base", "endpoint", "host", "server_url", "baseURL", "anthropic_api_url"]


@pytest.fixture
def server():
    with LoopbackLLMServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "OLLAMA_API_KEY",
        "OLLAMA_HOST",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)


def _study(tmp_path: Path, backend: str, model: str, options: dict[str, Any]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(backend=backend, model=model, options=json.dumps(options)))
    return path


def _problems(tmp_path: Path, backend: str, model: str, options: dict[str, Any], **kw: Any):
    # The run's check itself: validation (check_backends) refuses the same options earlier.
    study = load_study(_study(tmp_path, backend, model, options), check_backends=False)
    return [str(p) for p in endpoint_problems(study.config, study.source_map, **kw)]


def test_the_aliases_are_the_installed_integrations_own_fields() -> None:
    from langchain_openai import AzureChatOpenAI, ChatOpenAI

    classes = {"openai": ChatOpenAI, "azure_openai": AzureChatOpenAI}
    for provider, name in INSTALLED_ALIASES:
        fields = classes[provider].model_fields
        names = set(fields) | {f.alias for f in fields.values() if f.alias}
        assert name in names, (provider, name)
    from langchain_ollama import ChatOllama

    assert "base_url" in ChatOllama.model_fields and "client_kwargs" in ChatOllama.model_fields
    # The aliases pydantic accepts for the base URL field itself.
    assert ChatOpenAI.model_fields["openai_api_base"].alias == "base_url"
    for _, name in INSTALLED_ALIASES:
        assert _SERVER_KEY.search(name.lower())


@pytest.mark.parametrize(
    ("provider", "alias"),
    sorted(INSTALLED_ALIASES) + [("openai", alias) for alias in OTHER_ALIASES],
)
def test_each_url_alias_in_kwargs_is_a_destination_the_user_must_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, alias: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-user")
    options = {"kwargs": {alias: "https://collector.example.net:8443/v1"}}
    refused = _problems(tmp_path, "langchain", f"{provider}:m", options, allowed=[])
    assert len(refused) == 1, refused
    assert f"options.kwargs.{alias}" in refused[0]
    assert "collector.example.net:8443" in refused[0] and "--allow-endpoint" in refused[0]
    assert "study.yaml:" in refused[0]  # file and line
    allowed = _problems(
        tmp_path, "langchain", f"{provider}:m", options, allowed=["collector.example.net"]
    )
    assert allowed == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"client_kwargs": {"base_url": "http://relay.example.net"}},
        {"client_kwargs": {"proxy": "http://relay.example.net:3128"}},
        {"async_client_kwargs": {"mounts": {"all://": "http://relay.example.net"}}},
    ],
)
def test_ollama_client_kwargs_that_route_requests_are_destinations(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    refused = _problems(tmp_path, "langchain", "ollama:m", {"kwargs": kwargs}, allowed=[])
    assert len(refused) == 1 and "relay.example.net" in refused[0], refused


def test_a_key_in_kwargs_is_refused_at_any_depth(tmp_path: Path) -> None:
    for kwargs, field in (
        ({"openai_api_key": "sk-x"}, "options.kwargs.openai_api_key"),
        ({"api_key": "sk-x"}, "options.kwargs.api_key"),
        ({"client_kwargs": {"headers": {"Authorization": "Bearer x"}}}, "Authorization"),
    ):
        refused = _problems(tmp_path, "langchain", "ollama:m", {"kwargs": kwargs}, allowed=[])
        assert len(refused) == 1 and field in refused[0], refused
        assert "may not be written in a study file" in refused[0]


def test_langchain_ollama_declares_the_key_its_client_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ollama client sends OLLAMA_API_KEY by itself: a loopback server a study names is
    exempt only while that variable is unset."""
    options = {"base_url": "http://127.0.0.1:9"}
    assert _problems(tmp_path, "langchain", "ollama:m", options, allowed=[]) == []
    monkeypatch.setenv("OLLAMA_API_KEY", "ok-user")
    refused = _problems(tmp_path, "langchain", "ollama:m", options, allowed=[])
    assert len(refused) == 1 and "OLLAMA_API_KEY" in refused[0]


def test_an_unknown_langchain_provider_needs_the_users_trust(tmp_path: Path) -> None:
    refused = _problems(tmp_path, "langchain", "anthropic:claude", {}, allowed=[])
    assert len(refused) == 1 and "--trust-backend langchain:anthropic" in refused[0]
    trusted = _problems(
        tmp_path, "langchain", "anthropic:claude", {}, allowed=[], trusted=["langchain:anthropic"]
    )
    assert trusted == []
    # Trust covers what it cannot declare, not a server the study chose: that is still asked,
    # even on loopback, since the provider's own key variables are unknown.
    options = {"kwargs": {"anthropic_api_url": "http://127.0.0.1:9"}}
    chosen = _problems(
        tmp_path, "langchain", "anthropic:c", options, allowed=[], trusted=["langchain:anthropic"]
    )
    assert len(chosen) == 1 and "127.0.0.1:9" in chosen[0]


def test_the_built_in_backends_declare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from biasim.simulator.llm.allowlist import declared_egress

    class Role:
        backend = "openai"
        model = "m"
        options: ClassVar[dict[str, Any]] = {}

    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm.lab:8000/v1")
    egress = declared_egress(Role())
    assert [h.url for h in egress.hosts] == ["http://vllm.lab:8000/v1"]
    assert egress.env_vars == ("OPENAI_API_KEY",) and egress.hosts[0].field is None
    for name in ("synthetic", "local"):
        Role.backend = name
        assert declared_egress(Role()).hosts == ()
    Role.backend, Role.options = "ollama", {"host": "http://gpu-box:11434"}
    egress = declared_egress(Role())
    assert egress.hosts[0].field == "options.host" and egress.env_vars == ("OLLAMA_API_KEY",)


def test_a_langchain_url_in_kwargs_gets_no_key_until_the_user_allows_the_host(
    tmp_path: Path, server: LoopbackLLMServer, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-user-key")
    options = {"kwargs": {"openai_api_base": server.openai_base_url}, "structured": "none"}
    study = _study(tmp_path, "langchain", "openai:loopback-model", options)
    refused = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2, refused.output
    assert "options.kwargs.openai_api_base" in refused.stderr
    assert "OPENAI_API_KEY" in refused.stderr and "--allow-endpoint 127.0.0.1:" in refused.stderr
    assert server.requests == [] and not (tmp_path / "a").exists()

    host = f"127.0.0.1:{server.port}"
    out = tmp_path / "b"
    done = cli.invoke(app, ["run", str(study), "--out", str(out), "--allow-endpoint", host])
    assert done.exit_code == 0, done.output
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer sk-real-user-key"}
    manifest = (out / "manifest.json").read_text()
    recorded = json.loads(manifest)["destinations"]["decider"]
    assert recorded == {"hosts": [server.openai_base_url], "env_vars": ["OPENAI_API_KEY"]}
    assert all("sk-real-user-key" not in p.read_text(errors="ignore") for p in out.rglob("*.json"))


class CorpBackend(OpenAIBackend):
    """A plug-in that subclasses the openai backend, as the audit's did."""

    name = "corp_llm"


class OpaqueBackend:
    """A plug-in that declares nothing (it could contact anything)."""

    name = "opaque"

    def __init__(self, role: Any) -> None:
        from biasim.simulator.llm.synthetic import SyntheticBackend

        self._inner = SyntheticBackend(role)
        self.synthetic, self.default_concurrency = True, 4

    def identity(self) -> dict[str, Any]:
        return {**self._inner.identity(), "backend": self.name}

    async def generate(self, request: Any) -> Any:
        return await self._inner.generate(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
def entry_point_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`corp_llm` and `opaque` installed through the `biasim.backends` entry-point group."""
    site = tmp_path / "site"
    info = site / "corp_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: corp-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[biasim.backends]\n"
        "corp_llm = tests.unit.llm.test_egress_declarations:CorpBackend\n"
        "opaque = tests.unit.llm.test_egress_declarations:OpaqueBackend\n"
    )
    monkeypatch.syspath_prepend(str(site))
    assert "corp_llm" in BACKENDS.names() and "opaque" in BACKENDS.names()


def test_a_plugin_backend_with_its_own_url_and_key_variable_is_refused_until_allowed(
    tmp_path: Path,
    server: LoopbackLLMServer,
    cli,
    monkeypatch: pytest.MonkeyPatch,
    entry_point_plugins: None,
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "tok-corp-secret")
    options = {"base_url": server.openai_base_url, "api_key_env": "SECRET_TOKEN"}
    study = _study(tmp_path, "corp_llm", "loopback-model", options)
    refused = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2, refused.output
    assert "SECRET_TOKEN" in refused.stderr and "options.api_key_env" in refused.stderr
    assert server.requests == []
    host = f"127.0.0.1:{server.port}"
    done = cli.invoke(
        app, ["run", str(study), "--out", str(tmp_path / "b"), "--allow-endpoint", host]
    )
    assert done.exit_code == 0, done.output
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer tok-corp-secret"}


def test_a_plugin_backend_that_declares_nothing_runs_only_when_trusted(
    tmp_path: Path, cli, entry_point_plugins: None
) -> None:
    study = _study(tmp_path, "opaque", "m", {})
    refused = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2, refused.output
    assert "--trust-backend opaque" in refused.stderr and "roles.decider.backend" in refused.stderr
    assert not (tmp_path / "a").exists()
    done = cli.invoke(
        app, ["run", str(study), "--out", str(tmp_path / "b"), "--trust-backend", "opaque"]
    )
    assert done.exit_code == 0, done.output


def test_validate_notes_what_run_will_refuse(tmp_path: Path, cli) -> None:
    options = {"kwargs": {"openai_api_base": "https://collector.example.net/v1"}}
    study = _study(tmp_path, "langchain", "openai:m", options)
    checked = cli.invoke(app, ["validate", str(study)])
    assert checked.exit_code == 0, checked.output
    assert "note:" in checked.stdout and "collector.example.net" in checked.stdout


class HardCodedBackend(OpenAIBackend):
    """A plug-in that inherits the openai declaration but connects somewhere else."""

    name = "hard_coded"

    def __init__(self, role: Any) -> None:
        super().__init__(role)
        self.base_url = "https://elsewhere.example.net/v1"


def test_a_backend_built_to_contact_an_undeclared_server_is_refused_before_any_call(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    BACKENDS.register("hard_coded", HardCodedBackend)
    try:
        study = _study(tmp_path, "hard_coded", "m", {})
        refused = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    finally:
        BACKENDS.unregister("hard_coded")
    assert refused.exit_code == 2, refused.output
    assert "elsewhere.example.net" in refused.stderr and "does not name" in refused.stderr
    assert not (tmp_path / "a").exists()


def test_a_proxy_in_kwargs_is_declared_beside_the_endpoint_it_leads_to() -> None:
    from biasim.simulator.llm.langchain_backend import LangChainBackend

    class Role:
        model = "openai:m"
        options: ClassVar[dict[str, Any]] = {"kwargs": {"openai_proxy": "http://proxy.lan:3128"}}

    egress = LangChainBackend.egress(Role())
    assert [(h.url, h.field) for h in egress.hosts] == [
        ("http://proxy.lan:3128", "options.kwargs.openai_proxy"),
        ("https://api.openai.com/v1", None),
    ]


def test_the_python_api_asks_the_same_and_takes_the_same_answers(
    tmp_path: Path, server: LoopbackLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import biasim
    from biasim.simulator.common.errors import InputError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-api-user")
    options = {"kwargs": {"openai_api_base": server.openai_base_url}, "structured": "none"}
    study = _study(tmp_path, "langchain", "openai:loopback-model", options)
    with pytest.raises(InputError, match=r"options\.kwargs\.openai_api_base"):
        biasim.run(study, out=tmp_path / "a")
    assert server.requests == []
    host = f"127.0.0.1:{server.port}"
    run = biasim.run(study, out=tmp_path / "b", allow_endpoints=(host,))
    assert run.manifest["destinations"]["decider"]["hosts"] == [server.openai_base_url]
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer sk-api-user"}
