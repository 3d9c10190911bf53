"""The http and python backends' parts: reply paths, the inputs a tool gets, what enters the
cache key (URL, body and mapping; header names, never their values)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from biasim.simulator.llm.answer_paths import map_answer, parse_mapping, parse_path
from biasim.simulator.llm.decision_tools import tool_inputs
from biasim.simulator.llm.errors import BackendConfigError, FatalBackendError
from biasim.simulator.llm.http_backend import parse_headers
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.types import LLMRequest
from biasim.simulator.study.tool_backends import HttpToolBackend

REPLY = {"result": {"score": 0.7}, "items": [{"label": "advance"}, {"label": "hold"}]}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$.result.score", 0.7),
        ("result.score", 0.7),
        ("items[0].label", "advance"),
        ("$.items[-1].label", "hold"),
        ("$", REPLY),
        ("$.items", REPLY["items"]),
    ],
)
def test_paths_read_dotted_and_jsonpath_forms(path, value) -> None:
    assert parse_path(path, "f").read(REPLY) == value


@pytest.mark.parametrize("path", ["a..b", "items[x]", "a.[0", "", "a b]"])
def test_malformed_paths_name_their_field(path) -> None:
    with pytest.raises(BackendConfigError) as err:
        parse_mapping({"score": path}, "options.response")
    assert err.value.field == "options.response.score"


def test_a_missing_path_says_where_the_reply_broke() -> None:
    mapping = parse_mapping({"score": "$.result.value", "d": "items[5].label"}, "r")
    with pytest.raises(
        FatalBackendError, match=r"no `\$.result.value`: `result` has keys \[score\]"
    ):
        map_answer(REPLY, mapping)
    with pytest.raises(FatalBackendError, match=r"`items` is a list of 2, no index \[5\]"):
        map_answer(REPLY, {"d": mapping["d"]})
    with pytest.raises(FatalBackendError, match="not an object of the output fields"):
        map_answer([1, 2], None)


def request(document: str, seed: int = 1) -> LLMRequest:
    messages = ({"role": "system", "content": "sys"}, {"role": "user", "content": document})
    return LLMRequest(messages=messages, temperature=0, top_p=1, max_tokens=None, seed=seed)


def test_a_tool_gets_the_document_and_its_fields_never_the_persona() -> None:
    inputs = tool_inputs(request('{"name": "Ana", "years": 3}'))
    assert inputs.document == '{"name": "Ana", "years": 3}' and inputs.system == "sys"
    assert inputs.fields == {"name": "Ana", "years": 3}
    assert tool_inputs(request("A plain résumé")).fields == {}


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Key": "sk-abc123"},
        {"X-Key": "my_key"},
        {"Authorization": {"env": "K", "scheme": "B x"}},
        {"Content-Type": "K"},
        ["K"],
    ],
)
def test_headers_name_variables_only(headers) -> None:
    with pytest.raises(BackendConfigError) as err:
        parse_headers(headers)
    assert err.value.field.startswith("options.headers")


def role(**options) -> SimpleNamespace:
    base = {
        "url": "http://127.0.0.1:9/score",
        "headers": {"X-Key": "TOOL_KEY"},
        "response": {"score": "$.s"},
    }
    return SimpleNamespace(options={**base, **options}, model=None, max_concurrency=None)


def key(backend: HttpToolBackend) -> str:
    runtime = BackendRuntime(backend, concurrency=1, policy=RetryPolicy())
    return runtime.cache_key(request("doc"))[0]


def test_the_cache_key_covers_url_body_and_mapping_never_the_key(monkeypatch) -> None:
    monkeypatch.setenv("TOOL_KEY", "secret-one")
    first = HttpToolBackend(role())
    assert "secret-one" not in repr(first.identity())
    monkeypatch.setenv("TOOL_KEY", "secret-two")
    assert key(HttpToolBackend(role())) == key(first)  # another key asks the same tool
    for changed in (
        role(url="http://127.0.0.1:9/score2"),
        role(url="http://127.0.0.1:9/score?version=3"),
        role(body='{"doc": {{ document | tojson }}}'),
        role(response={"score": "$.t"}),
    ):
        assert key(HttpToolBackend(changed)) != key(first)


def test_a_url_from_the_environment_or_its_default(monkeypatch) -> None:
    from biasim.simulator.llm.http_backend import tool_url

    option = {"url": {"env": "TOOL_URL", "default": "http://127.0.0.1:8765/v1/score"}}
    monkeypatch.delenv("TOOL_URL", raising=False)
    assert tool_url(option) == "http://127.0.0.1:8765/v1/score"
    monkeypatch.setenv("TOOL_URL", "http://127.0.0.1:40001/v1/score")
    assert tool_url(option) == "http://127.0.0.1:40001/v1/score"
    monkeypatch.setenv("TOOL_URL", "ftp://elsewhere")
    for bad, reason in (
        (option, "needs `url`"),  # the variable's value is checked as a written URL is
        ({"url": {"env": "lower"}}, "upper-case variable name"),
        ({"url": {"env": "UNSET_TOOL_URL_X"}}, "UNSET_TOOL_URL_X is not set"),
    ):
        with pytest.raises(BackendConfigError, match=re.escape(reason)) as err:
            tool_url(bad)
        assert err.value.field == "options.url"
