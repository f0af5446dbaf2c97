"""The catalogue of installed agents, entry by entry: artifacts, headless invocation, the
allowlist mapped onto each CLI's tools, and session logs read as steps (hostile input
included). Pure: no Docker, no registry."""

from __future__ import annotations

import json

import pytest

from runner.agents.installed import aider, claude_code, codex, mini_swe_agent
from runner.agents.installed.catalogue import KINDS, kind_of
from runner.agents.installed.fetch import Target, artifacts_digest, platform_flags
from runner.agents.installed.kind import (
    HOME,
    PLACEHOLDER_KEY,
    Kind,
    Launch,
    denied_tools,
    violations,
)
from runner.agents.installed.layer import agent_tag, target_of, unsupported
from runner.agents.installed.session_log import EXCERPT_CHARS, excerpt

LAUNCH = Launch("Fix calc.add", "m-1", "http://model-gateway:8080/v1", {}, (), 60.0)


def test_the_catalogue_holds_the_four_clis() -> None:
    assert set(KINDS) == {"claude-code", "codex", "aider", "mini-swe-agent"}
    assert kind_of("claude") is None


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_every_entry_is_complete(kind: Kind) -> None:
    artifacts = kind.artifacts("1.2.3")
    assert artifacts and all("1.2.3" in a.version for a in artifacts)
    assert kind.api in ("anthropic", "openai-chat", "openai-responses")
    invocation = kind.invocation(LAUNCH)
    assert invocation.argv
    # The prompt reaches the CLI; the only key it sees is the placeholder.
    assert any("Fix calc.add" in arg for arg in invocation.argv)
    assert invocation.env.get("HOME") == HOME
    keyed = [v for v in invocation.env.values() if v.startswith("sk-")]
    keyed += [a for a in invocation.argv if a.startswith("sk-")]
    assert set(keyed) <= {PLACEHOLDER_KEY}
    for path in invocation.files:
        assert path.startswith(HOME + "/")
    for target in kind.toggle_targets:
        assert not target.startswith("/") and ".." not in target.split("/")
    assert kind.steps({}) == []


def test_npm_artifacts_name_the_native_binary() -> None:
    (claude,) = claude_code.artifacts("2.1.328")
    assert claude.spec == "@anthropic-ai/claude-code-linux-x64@2.1.328"
    assert claude.members == {"package/claude": "bin/claude"}
    (cx,) = codex.artifacts("0.171.0")
    assert cx.spec == "@openai/codex@0.171.0-linux-x64"
    assert "bin/codex" in cx.members.values()
    assert aider.artifacts("0.86.2")[0].spec == "aider-chat==0.86.2"


def test_claude_code_runs_headless_and_maps_the_allowlist() -> None:
    launch = Launch("p", "m", "http://model-gateway:8080", {"max_turns": 5}, ("read_file",), 60)
    argv = claude_code.invocation(launch).argv
    assert argv[:3] == ("/opt/deltarun-agent/bin/claude", "-p", "p")
    assert "--dangerously-skip-permissions" in argv and "stream-json" in argv
    assert argv[argv.index("--max-turns") + 1] == "5"
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert "Bash" in denied and "Write" in denied and "Read" not in denied
    env = claude_code.invocation(launch).env
    assert env["ANTHROPIC_BASE_URL"] == "http://model-gateway:8080"
    assert env["DISABLE_AUTOUPDATER"] == "1"


def test_an_empty_allowlist_keeps_the_agents_own_tools() -> None:
    argv = claude_code.invocation(LAUNCH).argv
    assert "--disallowedTools" not in argv
    assert denied_tools(claude_code.tool_names, ()) == []
    assert violations(claude_code, (), ["Bash", "Anything"]) == []


def test_violations_count_calls_outside_the_allowlist() -> None:
    allow = ("read_file", "write_file")
    called = ["Read", "Edit", "Bash", "TodoWrite", "Unknown"]
    assert violations(claude_code, allow, called) == ["Bash", "Unknown"]
    assert violations(mini_swe_agent, ("read_file",), ["bash"]) == ["bash"]
    assert violations(mini_swe_agent, ("run_command",), ["bash"]) == []


def test_codex_config_points_only_at_the_gateway() -> None:
    invocation = codex.invocation(LAUNCH)
    config = invocation.files[f"{HOME}/.codex/config.toml"].decode()
    assert 'base_url = "http://model-gateway:8080/v1"' in config
    assert 'wire_api = "responses"' in config
    assert "[analytics]\nenabled = false" in config
    assert invocation.env[codex.KEY_VARIABLE] == PLACEHOLDER_KEY
    assert invocation.env["CODEX_HOME"] == f"{HOME}/.codex"
    assert "--dangerously-bypass-approvals-and-sandbox" in invocation.argv


def test_python_clis_start_with_the_images_python_and_their_site() -> None:
    argv = aider.invocation(LAUNCH).argv
    assert argv[0] == "python3" and "/opt/deltarun-agent/site" in argv[2]
    assert argv[argv.index("--model") + 1] == "openai/m-1"
    assert "--no-check-update" in argv and "--analytics-disable" in argv
    assert argv[argv.index("--chat-history-file") + 1].startswith(HOME)
    metadata = json.loads(aider.invocation(LAUNCH).files[aider.METADATA])
    assert "openai/m-1" in metadata
    mini = mini_swe_agent.invocation(LAUNCH)
    assert mini.argv[mini.argv.index("-m") + 1] == "openai/m-1"
    assert mini.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_claude_stream_json_reads_as_steps() -> None:
    events = [
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "cat calc.py"}},
                ],
                "usage": {"input_tokens": 10, "output_tokens": 4},
            },
        },
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x=1"}]}},
        {"type": "result", "usage": {}},
    ]
    log = "\n".join(json.dumps(e) for e in events).encode() + b"\nnot json\n[1,2]\n"
    steps = claude_code.steps({"stdout": log})
    assert [s.role for s in steps] == ["assistant", "assistant", "tool"]
    assert steps[1].tool == "Bash" and "cat calc.py" in (steps[1].arguments or "")
    assert steps[1].input_tokens == 10 and steps[2].result == "x=1"


def test_codex_events_read_as_steps() -> None:
    events = [
        {"type": "item.completed", "item": {"type": "agent_message", "text": "ok"}},
        {
            "type": "item.completed",
            "item": {"type": "command_execution", "command": "ls", "aggregated_output": "a"},
        },
        {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 2}},
    ]
    steps = codex.steps({"stdout": "\n".join(json.dumps(e) for e in events).encode()})
    assert [(s.tool, s.result) for s in steps] == [(None, None), ("exec_command", "a")]
    assert steps[-1].output_tokens == 2


def test_mini_and_aider_logs_read_as_steps() -> None:
    trajectory = {
        "messages": [
            {"role": "system", "content": "be good"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "bash", "arguments": '{"command":"ls"}'}}],
            },
            {"role": "tool", "content": "calc.py"},
        ]
    }
    steps = mini_swe_agent.steps({"traj.json": json.dumps(trajectory).encode()})
    assert [s.role for s in steps] == ["system", "assistant", "tool"]
    assert steps[1].tool == "bash" and steps[2].result == "calc.py"
    history = b"# aider chat started\n\n#### fix it\n\n> Added calc.py\n\nDone, fixed.\n"
    steps = aider.steps({".aider.chat.history.md": history})
    assert [(s.role, s.text) for s in steps] == [("user", "fix it"), ("assistant", "Done, fixed.")]


@pytest.mark.parametrize(
    "log",
    [b"", b"\xff\xfe garbage", b'{"type": "assistant", "message": 5}', b"[" * 10000, b"{}" * 99],
)
def test_hostile_logs_make_short_trajectories_not_errors(log: bytes) -> None:
    for kind in KINDS.values():
        steps = kind.steps({"stdout": log, "traj.json": log, ".aider.chat.history.md": log})
        assert isinstance(steps, list)


def test_excerpts_are_bounded() -> None:
    text = excerpt("x" * (EXCERPT_CHARS + 50))
    assert len(text) < EXCERPT_CHARS + 20 and text.endswith("[50 more]")
    assert excerpt(None) == ""


def test_wheels_are_asked_for_the_images_python_and_glibc() -> None:
    flags = platform_flags(Target((3, 11), (2, 36)))
    assert flags[flags.index("--python-version") + 1] == "3.11"
    assert "cp311" in flags and "manylinux_2_36_x86_64" in flags
    assert "manylinux_2_37_x86_64" not in flags and "manylinux2014_x86_64" in flags


def test_the_image_probe_and_what_an_image_cannot_run() -> None:
    target = target_of("glibc 2.36\npython 3 11\n")
    assert target == Target((3, 11), (2, 36))
    assert unsupported(aider, target) is None
    assert "no glibc" in (unsupported(claude_code, target_of("python 3 11\n")) or "")
    assert unsupported(codex, target_of("")) is None  # musl-static: runs anywhere
    assert "Python 3.9" in (unsupported(aider, target_of("glibc 2.31\npython 3 9\n")) or "")
    assert "no python3" in (unsupported(mini_swe_agent, target_of("glibc 2.36\n")) or "")


def test_tags_and_digests_are_stable() -> None:
    assert agent_tag(codex, "0.171.0", "sha256:" + "ab" * 32) == (
        "deltarun-agent/codex:0.171.0-abababababab"
    )
    a = artifacts_digest([("b.whl", "2"), ("a.tgz", "1")])
    assert a == artifacts_digest([("a.tgz", "1"), ("b.whl", "2")])
    assert a != artifacts_digest([("a.tgz", "1"), ("b.whl", "3")])
