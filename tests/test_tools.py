"""The tool policy (pure), the chat-completions client and the openai controls, without Docker."""

from __future__ import annotations

import posixpath
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.agents.loop.client import ChatEndpoint, DeadlineReached
from runner.agents.loop.tool_policy import (
    Allowed,
    Refused,
    check,
    check_path,
    check_resolved,
    patch_paths,
    tool_definitions,
)
from runner.config.loader import missing_api_keys, parse_controls
from runner.errors import EndpointError, UserError
from tests.fake_openai import FakeModel, Step, call, error, reply
from tests.helpers import owned_key

FORBIDDEN = [".git/", "secrets/"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("calc/__init__.py", "calc/__init__.py"),
        ("./calc//x/../y.py", "calc/y.py"),
        ("/workspace/calc", "calc"),
        ("/workspace", "."),
        ("", "."),
    ],
)
def test_paths_are_normalised_into_the_workspace(path: str, expected: str) -> None:
    assert check_path(path, FORBIDDEN) == expected


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("../x", "escape"),
        ("a/../../x", "escape"),
        ("/etc/passwd", "escape"),
        ("/workspace/../etc/passwd", "escape"),
        ("/workspacefoo/x", "escape"),
        (".git", "forbidden"),
        (".git/config", "forbidden"),
        ("/workspace/secrets/k", "forbidden"),
        ("x/../secrets", "forbidden"),
        ("a\x00b", "path"),
    ],
)
def test_escapes_and_forbidden_paths_are_refused(path: str, rule: str) -> None:
    refused = check_path(path, FORBIDDEN)
    assert isinstance(refused, Refused) and refused.violation
    assert refused.detail["rule"] == rule


@given(st.text(alphabet="ab./\\-_ sg", max_size=30))
def test_an_allowed_path_never_leaves_the_workspace_or_enters_a_forbidden_one(text: str) -> None:
    result = check_path(text, FORBIDDEN)
    if isinstance(result, Refused):
        return
    absolute = posixpath.normpath(posixpath.join("/workspace", result))
    assert absolute == "/workspace" or absolute.startswith("/workspace/")
    assert not (result + "/").startswith((".git/", "secrets/"))


def test_resolved_paths_are_checked_again() -> None:
    assert check_resolved("link", "/workspace/calc/x.py", FORBIDDEN) == "calc/x.py"
    out = check_resolved("link", "/etc/passwd", FORBIDDEN)
    assert isinstance(out, Refused) and out.detail["rule"] == "symlink"
    inside = check_resolved("link", "/workspace/.git/config", FORBIDDEN)
    assert isinstance(inside, Refused) and inside.detail["rule"] == "symlink"


def test_unlisted_and_unknown_tools_are_violations_malformed_arguments_are_not() -> None:
    allow = ["read_file"]
    assert isinstance(check("read_file", '{"path": "a"}', allow, FORBIDDEN), Allowed)
    for name in ("run_command", "rm_rf", "run_hidden_test"):
        refused = check(name, "{}", allow, FORBIDDEN)
        assert isinstance(refused, Refused) and refused.violation, name
    for raw in ('{"path": ', "[]", '{"path": 3}', '"x"'):
        refused = check("read_file", raw, allow, FORBIDDEN)
        assert isinstance(refused, Refused) and not refused.violation, raw
    # submit and abstain end a trial whatever the allowlist says
    assert isinstance(check("submit", "{}", [], FORBIDDEN), Allowed)
    assert isinstance(check("abstain", '{"reason": "no input"}', [], FORBIDDEN), Allowed)


def test_every_path_of_a_patch_is_checked() -> None:
    good = "--- a/calc/x.py\n+++ b/calc/x.py\n@@ -1 +1 @@\n--- sql comment\n+x\n"
    assert patch_paths(good) == ["calc/x.py"]
    allowed = check("apply_patch", _args(patch=good), ["apply_patch"], FORBIDDEN)
    assert isinstance(allowed, Allowed) and allowed.paths == ("calc/x.py",)
    sneaky = "diff --git a/ok.py b/../../etc/cron.d/x\n--- a/ok.py\n+++ b/../../etc/cron.d/x\n@@ -0,0 +1 @@\n+x\n"
    refused = check("apply_patch", _args(patch=sneaky), ["apply_patch"], FORBIDDEN)
    assert isinstance(refused, Refused) and refused.detail["rule"] == "escape"
    git = "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n"
    refused = check("apply_patch", _args(patch=git), ["apply_patch"], FORBIDDEN)
    assert isinstance(refused, Refused) and refused.detail["rule"] == "forbidden"
    rename = "diff --git a/a b/b\nrename from a\nrename to secrets/b\n"
    assert "secrets/b" in patch_paths(rename)


def test_only_allowed_tools_are_offered() -> None:
    names = [t["function"]["name"] for t in tool_definitions(["read_file", "run_tests"])]
    assert names == ["read_file", "run_tests", "submit", "abstain"]


def _args(**kwargs: Any) -> str:
    import json

    return json.dumps(kwargs)


# -- the client ------------------------------------------------------------------------


def endpoint(url: str, key: str | None = None, attempts: int = 3) -> ChatEndpoint:
    return ChatEndpoint(url, key, max_attempts=attempts, request_timeout_s=10, sleep=lambda s: None)


def test_client_sums_usage_and_sends_the_key_only_in_the_header() -> None:
    with FakeModel([reply(call("submit", {}), usage=(11, 7))], key="sk-x") as fake:
        out = endpoint(fake.base_url, "sk-x").complete({"model": "m"}, time.monotonic() + 10)
    assert (out.prompt_tokens, out.completion_tokens, out.model) == (11, 7, "qwen-test")
    assert fake.headers[0]["authorization"] == "Bearer sk-x"
    assert "sk-x" not in str(fake.requests[0])


def test_client_retries_429_and_5xx_honouring_retry_after() -> None:
    waits: list[float] = []
    script = [error(429, retry_after="2"), error(502), reply(content="ok")]
    with FakeModel(script) as fake:
        client = endpoint(fake.base_url)
        client.sleep = waits.append
        out = client.complete({}, time.monotonic() + 60)
    assert out.attempts == 3 and waits == [2.0, 1.0]


def test_client_does_not_retry_a_refused_key_and_never_prints_it() -> None:
    with (
        FakeModel([], key="right") as fake,
        pytest.raises(EndpointError, match="refused the API key") as caught,
    ):
        endpoint(fake.base_url, "sk-wrong-123").complete({}, time.monotonic() + 10)
    assert len(fake.requests) == 1 and "sk-wrong-123" not in str(caught.value)


def test_client_rejects_a_reply_that_is_not_a_chat_completion() -> None:
    with (
        FakeModel([Step(200, {"object": "list"})]) as fake,
        pytest.raises(EndpointError, match="not a chat completion"),
    ):
        endpoint(fake.base_url).complete({}, time.monotonic() + 10)


def test_client_stops_at_the_deadline_rather_than_sleeping_past_it() -> None:
    with FakeModel([error(503, retry_after="30")]) as fake, pytest.raises(DeadlineReached):
        endpoint(fake.base_url).complete({}, time.monotonic() + 5)


# -- controls --------------------------------------------------------------------------

BASE = """
protocol_id: p
suite: {file: suite/tasks.jsonl}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
"""


def test_an_openai_arm_needs_a_route() -> None:
    text = BASE + "  - {name: m, agent: {type: openai}}\n"
    with pytest.raises(UserError, match=r"openai agent without a route"):
        parse_controls(text, "controls.yaml")


def test_an_unknown_tool_in_the_allowlist_is_named() -> None:
    text = BASE + "tools: {allowlist: [read_file, rm_rf]}\n"
    with pytest.raises(UserError, match=r"'rm_rf' is not a tool"):
        parse_controls(text, "controls.yaml")


def test_missing_keys_are_found_for_the_routes_in_use(tmp_path: Path) -> None:
    text = (
        BASE
        + "  - {name: m, agent: {type: openai}}\n"
        + "  - name: small\n    agent:\n      type: openai\n"
        + "      route: {base_url: 'http://127.0.0.1:9/v1', model: s, api_key_env: SMALL_KEY}\n"
        + "route: {base_url: 'http://127.0.0.1:9/v1', model: big, api_key_env: BIG_KEY}\n"
    )
    controls = parse_controls(text, "controls.yaml")
    owner = owned_key(tmp_path, "BIG_KEY", "http://127.0.0.1:9")
    owner = owned_key(tmp_path, "SMALL_KEY", "http://127.0.0.1:9")
    assert missing_api_keys(controls, owner) == [
        "route.api_key_env: BIG_KEY",
        "arms[2].agent.route.api_key_env: SMALL_KEY",
    ]
    assert missing_api_keys(controls, {"BIG_KEY": "a", "SMALL_KEY": "b", **owner}) == []
    assert controls.route_for(controls.arms[2].agent).model == "s"  # type: ignore[union-attr]


def test_a_key_in_the_controls_file_is_not_a_field() -> None:
    text = BASE + "route: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key: sk-1}\n"
    with pytest.raises(UserError, match=r"route.api_key: unknown key"):
        parse_controls(text, "controls.yaml")
