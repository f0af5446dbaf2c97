"""The four installed agent CLIs, end to end and offline: each released CLI layered onto the
sandbox image, run by ``execute_trial`` under ``network: model-only``, talking to a scripted
model (tests/fake_models.py) in the real wire format of its API through the trial's gateway.

The fake model runs in a thread of this process, bound to the host's address on a test
network; that network is the gateway's egress (``runtime.model_network``), so every request
goes sandbox -> gateway proxy -> host, and nothing else leaves the sandbox. The artifacts
are fetched once into the user's cache (``~/.cache/deltarun/agents``, as a run would), so
later sessions layer them without a registry.

Each CLI fixes ``calc.add`` and the hidden test passes; the record's tokens are what the fake
served; the real key reaches the fake and nothing the sandbox holds, the record or its
transcript. On Claude Code (the quickest of the four to start): a spent token budget ends the
trial as a miss, a tool outside ``tools.allowlist`` is a violation, a ``baseline: both`` arm
places its skill on the -on leg only, and a request to another host gets nowhere.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import secrets
import shutil
import tarfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.agents.factory import agents_for, arm_members
from runner.agents.installed.arm_checks import check_installed
from runner.agents.installed.catalogue import KINDS
from runner.agents.installed.kind import PLACEHOLDER_KEY
from runner.agents.installed.layer import AgentImages
from runner.config.arms import InstalledAgent
from runner.config.controls import Price
from runner.config.loader import load_controls
from runner.config.model_keys import KEYS_DIR_ENV
from runner.records import Job, Outcome, Trial
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.gateway_container import PROXY_IMAGE
from runner.sandbox.image_build import DockerImageBuilder
from runner.suite.load import load_suite
from runner.suite.sealing import seal_target
from runner.trees.inputs import LocalInputs
from runner.trial.env import trial_env
from runner.trial.execute import execute_trial
from tests.conftest import IN_CI, leftover_sandboxes
from tests.fake_models import Call, Conversation, FakeModels, Reply, Request, Script, Usage
from tests.helpers import PY_IMAGE, make_suite, owned_key, repo_task

pytestmark = pytest.mark.docker

VERSIONS = {
    "claude-code": "2.1.328",
    "codex": "0.171.0",
    "aider": "0.86.2",
    "mini-swe-agent": "2.4.6",
}
MODELS = {
    "claude-code": "claude-e2e-1",
    "codex": "gpt-e2e-codex",
    "aider": "e2e-chat-1",
    "mini-swe-agent": "e2e-chat-1",
}
KEY_ENV = "DELTARUN_E2E_MODEL_KEY"
PROMPT = "Fix add() in calc: it must return the sum."
FIX = "sed -i 's/a - b/a + b/' calc/__init__.py"
# What a request from the sandbox to another host gets: the fake model's own address (which
# the gateway reaches) and a name on the internet (whose lookup the sandbox's resolver never
# answers: cut short), one NET-REACHED or NET-BLOCKED line each. The words are split in the
# command, so that only its output holds them whole.
NET_PROBE = """timeout 4 python3 -c "
import sys, urllib.request
for url in sys.argv[1:]:
    try:
        urllib.request.urlopen(url, timeout=3)
        print('NET-' + 'REACHED', url, flush=True)
    except Exception as exc:
        print('NET-' + 'BLOCKED', url, type(exc).__name__, flush=True)
" {direct} http://example.com/"""
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
WHOLE = "calc/__init__.py\n```python\ndef add(a, b):\n    return a + b\n```\n"
# What the agent's uid can see of the sandbox: every process's environment and command line,
# and every small file it can read outside the image's own directories.
DUMP = (
    "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>/dev/null | tr '\\0' '\\n'; "
    "find /home /tmp /workspace /io -xdev -type f -size -8M -exec cat {} + 2>/dev/null; true"
)
# The user's cache, as it was before conftest pointed DELTARUN_CACHE at a session directory
# (read when this module is imported, before any fixture runs).
AGENT_CACHE = (
    Path(os.environ.get("DELTARUN_CACHE") or Path.home() / ".cache" / "deltarun") / "agents"
)


class Layers:
    """Agent images on the sandbox image, built (or reused) once per session on first use:
    the artifacts come from the user's cache, fetched with npm and pip the first time."""

    def __init__(self, images: AgentImages, base_id: str) -> None:
        self.images = images
        self.base_id = base_id
        self.tags: dict[str, str] = {}

    def ensure(self, name: str) -> str:
        if name not in self.tags:
            self.tags[name] = self.images.ensure(KINDS[name], VERSIONS[name], PY_IMAGE).tag
        return self.tags[name]


@pytest.fixture(scope="session")
def layers(docker_api: Any) -> Layers:
    if shutil.which("npm") is None:  # the npm CLIs are fetched with it
        message = "npm is not installed; the installed agents are fetched with it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    builder = DockerImageBuilder(docker_api)
    base = builder.inspect(PY_IMAGE)
    assert base is not None, PY_IMAGE
    return Layers(AgentImages(builder, builder, lambda line: None, AGENT_CACHE), base.id)


@dataclass(frozen=True)
class HostNet:
    """A test network and the host's address on it (where the fake model listens)."""

    name: str
    host: str


@pytest.fixture(scope="module")
def host_net(docker_api: Any) -> Iterator[HostNet]:
    name = f"deltarun-test-e2e-{uuid.uuid4().hex[:10]}"
    docker_api.create_network(name, driver="bridge", labels={"deltarun.test": name})
    try:
        config = docker_api.inspect_network(name)["IPAM"]["Config"][0]
        yield HostNet(name, config["Gateway"])
    finally:
        docker_api.remove_network(name)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The real key of this test, read by the gateway from the environment (api_key_env);
    its owner's key directory, where ``controls_for`` lists the fake model as its upstream."""
    value = "sk-e2e-real-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, value)
    monkeypatch.setenv(KEYS_DIR_ENV, str(tmp_path / "keys"))
    return value


class Sandbox:
    """What the agent's uid sees in the running sandbox A of ``run_id``, collected while the
    CLI waits for the model (the fake asks before it answers)."""

    def __init__(self, docker_api: Any, run_id: str) -> None:
        self.api = docker_api
        self.run_id = run_id
        self.dumps: list[bytes] = []

    def seen(self, script: Script) -> Script:
        """``script``, taking a look into the sandbox before each model request's answer."""

        def look(request: Request) -> Reply:
            self.dumps.append(self.dump())
            return script(request)

        return look

    def dump(self) -> bytes:
        label = f"deltarun.run={self.run_id}"
        found = b""
        for container in self.api.containers(filters={"label": label}):
            if container["Image"] == PROXY_IMAGE:
                continue  # the gateway's proxy holds the key, by design
            env = self.api.inspect_container(container["Id"])["Config"].get("Env") or []
            found += "\n".join(env).encode()
            run = self.api.exec_create(container["Id"], ["sh", "-c", DUMP], user="1000:1000")
            found += self.api.exec_start(run["Id"])
        return found


def controls_for(
    tmp_path: Path,
    name: str,
    fake: FakeModels,
    net: HostNet,
    *,
    arm: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    route: dict[str, Any] | None = None,
    **top: Any,
) -> Path:
    """Sealed controls of one calc task and one installed arm (``arm`` adds to it, ``route``
    to its route, ``top`` to the controls)."""
    prefix = "" if KINDS[name].api == "anthropic" else "/v1"
    url = fake.url + prefix
    owned_key(tmp_path / "keys", KEY_ENV, fake.url)  # the owner lets the key go there
    agent = {"type": "installed", "name": name, "version": VERSIONS[name]}
    path = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=120, prompt=PROMPT)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "cli", "agent": agent, **(arm or {})},
        ],
        runtime={"network": "model-only", "model_network": net.name},
        tools=tools,
        route={"base_url": url, "model": MODELS[name], "api_key_env": KEY_ENV, **(route or {})},
        seal=False,
    )
    controls = yaml.safe_load(path.read_text())
    controls.update(top)
    path.write_text(yaml.safe_dump(controls, sort_keys=False))
    seal_target(path, load_controls)
    return path


def run_legs(
    docker_api: Any,
    controls_path: Path,
    layers: Layers,
    run_id: str,
    before: Callable[[str], None] = lambda leg: None,
) -> dict[str, Trial]:
    """Every leg of the installed arm, one trial each, in order (``before`` is told each
    leg's name as it starts); nothing left behind."""
    loaded = load_controls(controls_path)
    controls = loaded.controls
    check_installed(controls, str(controls_path))  # what a run checks before it starts
    for arm in controls.arms:
        if isinstance(arm.agent, InstalledAgent):
            layers.ensure(arm.agent.name)
    suite = load_suite(loaded.suite_path, controls.suite.sha256)
    members = {arm.name: arm_members(arm, loaded.base) for arm in controls.arms}
    agents = agents_for(controls, members)
    factory = DockerSandboxFactory(docker_api)
    env = trial_env(controls, LocalInputs(suite), factory, "test", pins={PY_IMAGE: layers.base_id})
    trials = {}
    for leg in controls.legs():
        if leg.arm.control:
            continue
        job = Job(
            job_id=f"job-t1-{leg.name}",
            run_id=run_id,
            protocol_sha256="p" * 64,
            task_id="t1",
            arm=leg.name,
            repeat=0,
        )
        before(leg.name)
        trials[leg.name] = execute_trial(job, suite.task("t1"), agents[leg.name], env)
    assert leftover_sandboxes(docker_api, run=run_id) == ([], [])
    return trials


def shell(command: str) -> Callable[[Request], Reply]:
    """Codex's turn running ``command`` with whichever shell tool the request offers."""

    def turn(request: Request) -> Reply:
        names = request.tool_names
        if "exec_command" in names:
            return Reply(
                calls=(Call("exec_command", {"cmd": command}),), usage=Usage(2100, 60, 1024)
            )
        if "shell" in names:
            call = Call("shell", {"command": ["bash", "-lc", command]})
            return Reply(calls=(call,), usage=Usage(2100, 60, 1024))
        raise AssertionError(f"codex offers no shell tool: {names}")

    return turn


def bash(command: str, usage: Usage | None = None) -> Reply:
    return Reply(calls=(Call("bash", {"command": command}),), usage=usage or Usage(900, 30))


def claude_fix() -> Conversation:
    """Claude Code: a Bash call that fixes the file, then a final text; its side requests
    (no tools offered) get a short text."""
    fix = Call("Bash", {"command": FIX, "description": "Fix add"})
    turns = [
        Reply("I'll fix add().", (fix,), Usage(1500, 40, cache_read=1000, cache_write=200)),
        Reply("Fixed: add() returns a + b.", usage=Usage(1700, 15, cache_read=1500)),
    ]
    return Conversation(turns, since=PROMPT, main=lambda request: bool(request.tool_names))


SCRIPTS: dict[str, Callable[[], Conversation]] = {
    "claude-code": claude_fix,
    "codex": lambda: Conversation(
        [shell(FIX), Reply("Fixed add().", usage=Usage(2300, 20, 2048))],
        since=PROMPT,
        main=lambda request: bool(request.tool_names),
    ),
    "mini-swe-agent": lambda: Conversation(
        [bash(FIX), bash(SUBMIT, Usage(1000, 12))],
        after=bash(SUBMIT, Usage(1000, 12)),
        since=PROMPT,
    ),
    "aider": lambda: Conversation([Reply(WHOLE, usage=Usage(1300, 25))], since=PROMPT),
}


def check_keys(fake: FakeModels, key: str) -> None:
    """Every model request carried the real key, in its API's header, and no placeholder."""
    requests = fake.answered()
    assert requests, "the fake model saw no request"
    for request in requests:
        sent = (
            request.header("x-api-key")
            if request.api == "anthropic"
            else request.header("authorization")
        )
        assert sent == (key if request.api == "anthropic" else f"Bearer {key}"), request.path
        assert all(PLACEHOLDER_KEY not in value for _, value in request.headers)


PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


@pytest.mark.parametrize("name", list(VERSIONS))
def test_each_cli_fixes_the_task_through_the_gateway(
    name: str, tmp_path: Path, docker_api: Any, layers: Layers, host_net: HostNet, key: str
) -> None:
    run_id = f"run-e2e-{uuid.uuid4().hex[:12]}"
    sandbox = Sandbox(docker_api, run_id)
    with FakeModels(sandbox.seen(SCRIPTS[name]()), host=host_net.host) as fake:
        controls = controls_for(tmp_path, name, fake, host_net, prices={MODELS[name]: PRICE})
        trial = run_legs(docker_api, controls, layers, run_id)["cli"]
    assert not fake.errors, fake.errors
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.error, trial.agent_log[-3000:])
    assert "+    return a + b" in trial.patch
    # Tokens and dollars: what the fake served, as the gateway counted it.
    served = fake.served()
    assert (trial.prompt_tokens, trial.completion_tokens) == (served.prompt, served.completion)
    assert (trial.cache_read_tokens, trial.cache_write_tokens) == (
        served.cache_read,
        served.cache_write,
    )
    fresh = served.prompt - served.cache_read - served.cache_write
    dollars = Price(**PRICE).dollars(
        fresh, served.completion, served.cache_read, served.cache_write
    )
    assert trial.cost_usd == pytest.approx(dollars, abs=1e-6)
    # The key: at the model, never in the sandbox, the record or its transcript.
    check_keys(fake, key)
    dumps = b"".join(sandbox.dumps)
    assert PLACEHOLDER_KEY.encode() in dumps  # the look did reach the CLI's processes
    assert key.encode() not in dumps
    assert key not in trial.model_dump_json()
    check_session(trial, name, len(fake.answered()), key)
    # The session log as steps.
    assert trial.transcript, trial.agent_log[-3000:]
    if name != "aider":  # aider edits by text and logs no counts; the others call tools
        assert any(step.get("tool") for step in trial.transcript), trial.transcript
        counted = [(s.get("input_tokens", 0), s.get("output_tokens", 0)) for s in trial.transcript]
        assert tuple(map(sum, zip(*counted, strict=True))) == (served.prompt, served.completion)


SESSION_FILES = {
    "claude-code": "home/.claude/projects/",
    "codex": "home/.codex/sessions/",
    "mini-swe-agent": "home/traj.json",
    "aider": "home/.aider.chat.history.md",
}


def check_session(trial: Trial, name: str, requests: int, key: str) -> None:
    """The session kept whole: the CLI's own log files, its stdout and one gateway line per
    model request; the key nowhere in it."""
    assert trial.session is not None
    data = gzip.decompress(base64.b64decode(trial.session))
    assert key.encode() not in data
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive if m.isreg()}  # type: ignore[union-attr]
    assert any(path.startswith(SESSION_FILES[name]) for path in files), sorted(files)
    gateway = [json.loads(line) for line in files["gateway.jsonl"].splitlines()]
    assert len(gateway) == requests and all(line["status"] == 200 for line in gateway)
    assert sum(line["prompt_tokens"] for line in gateway) == trial.prompt_tokens
    assert files["stdout.log"]


def claude_run(
    tmp_path: Path,
    docker_api: Any,
    layers: Layers,
    host_net: HostNet,
    script: Script,
    **options: Any,
) -> tuple[dict[str, Trial], FakeModels, dict[str, list[Request]]]:
    """Claude Code's legs under ``options`` (as ``controls_for`` takes them): the trials,
    the fake model, and the model requests of each leg."""
    run_id = f"run-e2e-{uuid.uuid4().hex[:12]}"
    starts: dict[str, int] = {}
    with FakeModels(script, host=host_net.host) as fake:
        controls = controls_for(tmp_path, "claude-code", fake, host_net, **options)

        def before(leg: str) -> None:
            starts[leg] = len(fake.requests)

        trials = run_legs(docker_api, controls, layers, run_id, before)
    assert not fake.errors, fake.errors
    bounds = [*starts.values(), len(fake.requests)]
    legs = {
        leg: [r for r in fake.requests[bounds[i] : bounds[i + 1]] if r.api is not None]
        for i, leg in enumerate(starts)
    }
    return trials, fake, legs


def test_a_spent_token_budget_ends_the_trial_as_a_miss(
    tmp_path: Path, docker_api: Any, layers: Layers, host_net: HostNet, key: str
) -> None:
    # One answer spends 1540 tokens of 257: the gateway refuses the next request.
    look = Call("Bash", {"command": "ls", "description": "Look"})
    script = Conversation(
        [Reply("Looking.", (look,), Usage(1500, 40)), Reply("Done.", usage=Usage(1600, 5))],
        since=PROMPT,
        main=lambda request: bool(request.tool_names),
    )
    trials, _, legs = claude_run(
        tmp_path,
        docker_api,
        layers,
        host_net,
        script,
        route={"max_output_tokens": 256},
        budget={"trial_tokens": 257},
    )
    trial = trials["cli"]
    assert trial.outcome is Outcome.MISS and trial.error is None, (trial.error, trial.agent_log)
    assert trial.reason == "budget exhausted" and trial.stop_reason == "budget_exhausted"
    assert len(legs["cli"]) == 1  # the second request never reached the model
    assert (trial.prompt_tokens, trial.completion_tokens) == (1500, 40)


def test_a_tool_outside_the_allowlist_is_a_violation(
    tmp_path: Path, docker_api: Any, layers: Layers, host_net: HostNet, key: str
) -> None:
    script = claude_fix()  # asks for Bash, which the allowlist leaves out
    trials, _, legs = claude_run(
        tmp_path,
        docker_api,
        layers,
        host_net,
        script,
        tools={"allowlist": ["read_file"], "forbidden_paths": [".git/"]},
    )
    trial = trials["cli"]
    assert trial.tool_violation and trial.error is None, trial
    assert "tool calls outside tools.allowlist: Bash" in trial.agent_log
    assert all("Bash" not in r.tool_names for r in legs["cli"])  # not offered either
    assert trial.outcome is Outcome.MISS  # Claude Code refused to run it


SKILL = "---\nname: e2e-mark\ndescription: Marks the -on leg ({mark}-about)\n---\n{mark}-body\n"


def claude_bash(command: str) -> Reply:
    return Reply(calls=(Call("Bash", {"command": command, "description": "Run"}),))


def probe(request: Request) -> Reply:
    """Asks for the fake model directly, at the address the gateway reached it at."""
    direct = f"http://{request.header('host')}/v1/models"
    return claude_bash(NET_PROBE.format(direct=direct))


def test_a_skill_reaches_the_on_leg_only_and_no_other_host_is_reachable(
    tmp_path: Path, docker_api: Any, layers: Layers, host_net: HostNet, key: str
) -> None:
    mark = "E2E-SKILL-" + secrets.token_hex(6)
    skill = tmp_path / "skills" / "e2e-mark"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL.format(mark=mark))
    script = Conversation(
        [claude_bash("cat ~/.claude/skills/e2e-mark/SKILL.md || echo NO-SKILL"), probe],
        since=PROMPT,
        main=lambda request: bool(request.tool_names),
    )
    on_files = {"skills/e2e-mark": "skills/e2e-mark"}
    trials, fake, legs = claude_run(
        tmp_path,
        docker_api,
        layers,
        host_net,
        script,
        arm={"baseline": "both", "toggles": {"on_files": on_files}},
    )
    assert set(trials) == {"cli-on", "cli-off"}
    assert all(t.error is None for t in trials.values()), trials
    on, off = legs["cli-on"][-1], legs["cli-off"][-1]  # each leg's last request: both results
    assert f"{mark}-body" in on.tool_results[0]
    assert "NO-SKILL" in off.tool_results[0] and mark not in off.tool_results[0]
    assert f"{mark}-about" in on.text and mark not in off.text  # listed for the model
    for request in (on, off):
        assert "NET-BLOCKED http://" in request.tool_results[1], request.tool_results
        assert "NET-REACHED" not in request.tool_results[1]
    assert all(r.api is not None for r in fake.requests)  # the probe never reached the fake
