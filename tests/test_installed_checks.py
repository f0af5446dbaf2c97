"""Bad input for installed agents: one line naming the arm and the field, exit 2, before
anything is built or written; the protocol hash covers the -on leg's files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.agents.factory import arm_members, make_agent, toggle_members
from runner.agents.installed.agent import Installed
from runner.agents.installed.arm_checks import check_installed
from runner.config.arms import InstalledAgent, Toggles
from runner.config.controls import Controls
from runner.config.loader import load_controls, parse_controls
from runner.errors import UsageError, UserError
from runner.trees.archives import DIRECTORY_CAPS

ROUTE = {"base_url": "http://127.0.0.1:9/v1", "model": "m-1", "max_output_tokens": 1000}


def controls(**changes: Any) -> dict[str, Any]:
    arm: dict[str, Any] = {
        "name": "claude",
        "agent": {"type": "installed", "name": "claude-code", "version": "2.1.328"},
    }
    arm.update(changes.pop("arm", {}))
    data: dict[str, Any] = {
        "protocol_id": "p",
        "suite": {"file": "tasks.jsonl"},
        "runtime": {"network": "model-only"},
        "route": ROUTE,
        "arms": [
            {"name": "control", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            arm,
        ],
    }
    data.update(changes)
    return data


def parsed(data: dict[str, Any]) -> Controls:
    return parse_controls(yaml.safe_dump(data), "controls.yaml")


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(UsageError) as info:
        check_installed(parsed(data), "controls.yaml")
    assert info.value.exit_code == 2
    message = str(info.value)
    assert "\n" not in message and message.startswith("controls.yaml: ")
    return message


def test_a_sound_installed_arm_passes() -> None:
    check_installed(parsed(controls()), "controls.yaml")


def test_an_unknown_agent_is_named_with_the_catalogue() -> None:
    message = refused(
        controls(arm={"agent": {"type": "installed", "name": "claude", "version": "1"}})
    )
    assert "arms[1] (claude).agent.name: 'claude' is not in the catalogue" in message
    assert "claude-code" in message and "mini-swe-agent" in message


def test_a_version_must_be_exact() -> None:
    data = controls(arm={"agent": {"type": "installed", "name": "codex", "version": "^0.171"}})
    with pytest.raises(UserError, match="version"):
        parsed(data)


def test_network_route_settings_and_toggle_targets() -> None:
    assert "runtime.network: model-only" in refused(controls(runtime={"network": "none"}))
    no_route = controls()
    del no_route["route"]
    no_route["runtime"] = {"network": "model-only"}
    assert "arms[1] (claude).agent.route: no route" in refused(no_route)
    bad = controls(arm={"agent": {"type": "installed", "name": "aider", "version": "0.86.2",
                                  "settings": {"edit_fmt": "whole"}}})  # fmt: skip
    assert "agent.settings.edit_fmt: aider has no such setting (edit_format)" in refused(bad)
    outside = controls(
        arm={"baseline": "both", "toggles": {"on_files": {"../etc/passwd": "skill"}}}
    )
    assert "toggles.on_files.../etc/passwd: not one of claude-code's extension points" in refused(
        outside
    )


def test_prices_and_budgets_that_cannot_be_met() -> None:
    priced = {"m-2": {"input": 1, "output": 2}}
    assert "prices has no entry for model 'm-1'" in refused(controls(prices=priced))
    assert "prices has no entry" in refused(controls(budget={"trial_usd": 1.0}))
    low = refused(controls(budget={"trial_tokens": 10}))
    assert "budget.trial_tokens (10) is below one request's maximum output (1000" in low
    runs = controls(
        prices={"m-1": {"input": 1, "output": 2}}, budget={"trial_usd": 2, "run_usd": 1}
    )
    assert "budget.run_usd (1.0) is below budget.trial_usd (2.0)" in refused(runs)


def test_on_files_are_part_of_the_protocol_and_reach_only_the_on_leg(tmp_path: Path) -> None:
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("# lint first\n")
    data = controls(
        arm={
            "baseline": "both",
            "toggles": {"on_files": {"skills/lint": "skill"}, "env": {"X": "1"}},
        }
    )
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump(data))
    first = load_controls(path).protocol_sha256
    (tmp_path / "skill" / "SKILL.md").write_text("# lint last\n")
    assert load_controls(path).protocol_sha256 != first
    loaded = load_controls(path)
    arm = loaded.controls.arms[1]
    members = arm_members(arm, tmp_path)
    assert [m.path for m in members or []] == ["skills/lint/SKILL.md"]
    legs = {leg.name: leg for leg in loaded.controls.legs()}
    on = make_agent(arm.agent, members, legs["claude-on"].toggles, loaded.controls)
    off = make_agent(arm.agent, members, legs["claude-off"].toggles, loaded.controls)
    assert isinstance(on, Installed) and isinstance(off, Installed)
    assert [m.path for m in on.on_files] == ["skills/lint/SKILL.md"] and off.on_files == []
    assert off.env.get("X") == "1" and "X" not in on.env


def test_on_files_are_refused_on_other_agents() -> None:
    data = controls(
        arm={
            "agent": {"type": "scripted", "action": "noop"},
            "baseline": "both",
            "toggles": {"on_files": {"CLAUDE.md": "x"}},
        }
    )
    with pytest.raises(UserError, match="on_files and on_env are for installed agents"):
        parsed(data)


def test_old_protocols_keep_their_hash() -> None:
    """Settings added for installed agents hash only when set: a protocol without them
    hashes exactly as before they existed."""
    from runner.config.loader import UNSET_OMITTED, protocol_hash
    from runner.hashing import sha256_json

    plain = parsed(controls(arm={"agent": {"type": "scripted", "action": "noop"},
                                 "baseline": "both", "toggles": {"env": {"X": "1"}}}))  # fmt: skip
    before = plain.model_dump(mode="json", by_alias=True)
    for section, key in UNSET_OMITTED:
        if before[section].get(key) is None:
            del before[section][key]
    del before["prices"], before["budget"], before["gate"], before["rate_limits"]
    del before["arms"][1]["toggles"]["on_files"], before["arms"][1]["toggles"]["on_env"]
    assert protocol_hash(plain, {}) == sha256_json({"controls": before, "agent_dirs": {}})
    priced = parsed(
        controls(
            arm={"agent": {"type": "scripted", "action": "noop"}},
            prices={"m-1": {"input": 1, "output": 2}},
        )
    )
    assert protocol_hash(priced, {}) != protocol_hash(
        parsed(controls(arm={"agent": {"type": "scripted", "action": "noop"}})), {}
    )


def test_build_pins_the_artifacts_digest_into_the_controls(tmp_path: Path) -> None:
    from runner.run.agent_build import pin_artifacts

    path = tmp_path / "controls.yaml"
    text = "# keep this comment\n" + yaml.safe_dump(controls(), sort_keys=False)
    path.write_text(text)
    before = load_controls(path).protocol_sha256
    assert pin_artifacts(path, {1: "ab" * 32}) == 1
    written = path.read_text()
    assert written.startswith("# keep this comment\n")
    loaded = load_controls(path)
    agent = loaded.controls.arms[1].agent
    assert isinstance(agent, InstalledAgent) and agent.artifacts_sha256 == "ab" * 32
    assert loaded.protocol_sha256 != before  # the artifacts are part of the protocol
    assert pin_artifacts(path, {1: "ab" * 32}) == 0 and path.read_text() == written


class _Engine:
    """The engine as layering asks it before any build: the base exists and has glibc and
    Python 3.11 (no build is expected: the fetch is refused first)."""

    def inspect(self, image: str) -> Any:
        from runner.sandbox.images import ImageInfo

        return ImageInfo("sha256:" + "b" * 64, ()) if image == "base" else None

    def probe(self, image: str, script: str) -> str:
        return "glibc 2.36\npython 3 11\n"

    def build(self, *args: Any) -> str:
        raise AssertionError("nothing is built for a version the registry lacks")


@pytest.mark.parametrize(
    ("name", "version"),
    [("codex", "0.0.0-not-released"), ("mini-swe-agent", "0.0.0")],  # npm, then PyPI
)
def test_a_version_the_registry_lacks_is_exit_2_naming_the_field(
    name: str, version: str, tmp_path: Path
) -> None:
    """Asked of the real registries (npm, PyPI) with the user's own clients."""
    import shutil

    from runner.agents.installed.catalogue import kind_of
    from runner.agents.installed.layer import AgentImages

    if name == "codex" and shutil.which("npm") is None:
        pytest.skip("npm is not installed")  # .ci/run installs it; in CI a skip fails
    kind = kind_of(name)
    assert kind is not None
    engine = _Engine()
    images = AgentImages(engine, engine, lambda line: None, cache=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as info:
        images.ensure(kind, version, "base", where="controls.yaml: arms[1] (x)")
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message
    assert message.startswith("controls.yaml: arms[1] (x): agent.version: ")
    assert f"{name} {version} is not released" in message
    assert not any(tmp_path.rglob("manifest.json"))  # nothing kept in the cache


class _TriggeredBase(_Engine):
    """A base image carrying an ONBUILD trigger: nothing is probed, fetched or built."""

    def inspect(self, image: str) -> Any:
        from runner.sandbox.images import ImageInfo

        return ImageInfo("sha256:" + "b" * 64, (), {}, ("ADD http://127.0.0.1:1/x /x",))

    def probe(self, image: str, script: str) -> str:
        raise AssertionError("a base with triggers is refused before it is probed")


def test_a_base_with_onbuild_triggers_gets_no_agent_layer(tmp_path: Path) -> None:
    """Layering an agent is a build ``FROM`` the task's image: its triggers would run in it
    (an ``ADD <url>`` fetched by the engine from the host's network)."""
    from runner.agents.installed.catalogue import kind_of
    from runner.agents.installed.layer import AgentImages

    kind = kind_of("codex")
    assert kind is not None
    engine = _TriggeredBase()
    images = AgentImages(engine, engine, lambda line: None, cache=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(UserError) as info:
        images.ensure(kind, "0.171.0", "base", where="controls.yaml: arms[1] (x)")
    message = str(info.value)
    assert message.startswith("controls.yaml: arms[1] (x): image base carries 1 ONBUILD")
    assert "ADD http://127.0.0.1:1/x /x" in message and "\n" not in message


@pytest.mark.parametrize(
    ("name", "version", "settings", "message"),
    [
        ("aider", "0.86.2", {"edit_format": "whole --yes"}, "is not one of whole, diff, udiff"),
        ("aider", "0.86.2", {"edit_format": 3}, "is not one of whole, diff, udiff"),
        ("codex", "0.171.0", {"reasoning_effort": "max\nx"}, "is not one of minimal, low,"),
        ("claude-code", "2.1.328", {"max_turns": "--verbose"}, "is not a whole number"),
        ("claude-code", "2.1.328", {"max_turns": 0}, "is not a whole number of at least 1"),
        ("claude-code", "2.1.328", {"max_turns": True}, "is not a whole number"),
    ],
)
def test_a_setting_reaches_the_cli_only_as_a_value_it_takes(
    name: str, version: str, settings: dict[str, Any], message: str
) -> None:
    # Every setting ends on the CLI's command line or in its configuration: a value is
    # checked whole against what the CLI takes, never passed on unread.
    agent = {"type": "installed", "name": name, "version": version, "settings": settings}
    found = refused(controls(arm={"agent": agent}))
    key = next(iter(settings))
    assert f"arms[1] (claude).agent.settings.{key}: " in found and message in found
    good = {"aider": "diff", "codex": "high", "claude-code": 12}[name]
    check_installed(parsed(controls(arm={"agent": {**agent, "settings": {key: good}}})), "c")


def test_an_on_files_source_turned_into_a_fifo_or_grown_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    # The controls were read and hashed earlier; at trial time the source is read again,
    # capped and without waiting on a writer that never comes.

    toggles = Toggles(on_files={"skills/lint/SKILL.md": "skill.md"})
    os.mkfifo(tmp_path / "skill.md")
    with pytest.raises(UserError, match="not a regular file"):
        toggle_members(toggles, tmp_path)
    (tmp_path / "skill.md").unlink()
    (tmp_path / "skill.md").write_bytes(b"x" * (DIRECTORY_CAPS.max_member_bytes + 1))
    with pytest.raises(UserError, match="over the cap"):
        toggle_members(toggles, tmp_path)
    (tmp_path / "skill.md").write_text("lint first\n")
    [member] = toggle_members(toggles, tmp_path) or []
    assert (member.path, member.data) == ("skills/lint/SKILL.md", b"lint first\n")


def test_the_limits_of_deltarun_build_reach_the_agent_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``deltarun build controls.yaml --memory/--pids/--timeout``: the installed agents'
    layers are built by a builder with those limits, not one with the defaults."""
    import runner.sandbox.engine
    from runner.run import service
    from runner.suite.workflows import BuildLimits

    monkeypatch.setattr(runner.sandbox.engine, "connect", lambda timeout: "engine")
    handed: list[Any] = []
    monkeypatch.setattr(service, "ensure", lambda loaded, suite, images: handed.append(images))
    builder = BuildLimits(memory="64m", timeout_s=5, pids=32).builder()
    service.RunService().layer(None, None, None, builder)  # type: ignore[arg-type]
    [images] = handed
    assert images.builder is builder and images.prober is builder
    assert (builder.memory_bytes, builder.deadline_s, builder.pids) == (64 << 20, 5, 32)
