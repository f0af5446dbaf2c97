"""An installed agent CLI on the fleet, end to end: compose.yaml's Redis, registry and a
worker container; the coordinator on this host without the provider key; Codex (the
quickest of the four CLIs in tests/test_installed_e2e.py) layered by the coordinator,
pinned and pushed to the registry, pulled by the worker by digest; the trial's gateway,
started by the worker, the one place the key goes (from a key file mounted into the worker
container only); a scripted model over real HTTP.

The engine is shared by the host and the worker container, so the task image is this
test's own (the sandbox image plus a unique label): its agent layer exists nowhere else,
and is removed from the engine after the coordinator pushed it and before the worker starts,
so the image the trial runs from can only have come from the registry.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import redis
import yaml

from runner.agents.installed.catalogue import KINDS
from runner.agents.installed.kind import PLACEHOLDER_KEY
from runner.agents.installed.layer import agent_tag
from runner.config.controls import Price
from runner.config.loader import load_controls
from runner.config.model_keys import KEYS_DIR_ENV
from runner.distributed import keys
from runner.records import Outcome, Trial
from runner.sandbox.gateway_container import PROXY_IMAGE
from runner.suite.sealing import seal_target
from tests.conftest import IN_CI
from tests.distributed_support import DELTARUN, ROOT, free_port, make_secrets, wait_for
from tests.fake_models import Conversation, FakeModels, Reply, Request, Usage
from tests.helpers import PY_IMAGE, make_suite, repo_task
from tests.test_compose import _compose, _left
from tests.test_installed_e2e import AGENT_CACHE, DUMP, FIX, PROMPT, shell

pytestmark = pytest.mark.docker

NAME, VERSION, MODEL = "codex", "0.171.0", "gpt-fleet-codex"
KEY_ENV = "DELTARUN_FLEET_MODEL_KEY"
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3}


def _own_image(api: Any, tag: str) -> str:
    """The sandbox image under a label of this test alone (no new layer): its ID."""
    dockerfile = f"FROM {PY_IMAGE}\nLABEL deltarun.test.fleet={uuid.uuid4().hex}\n"
    for _ in api.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, decode=True
    ):
        pass
    return str(api.inspect_image(tag)["Id"])


def _sandboxes_dump(api: Any, image: str) -> bytes:
    """What the agent's uid sees in every running sandbox made from ``image``: every
    process's environment and command line, the small files it can read."""
    found = b""
    for container in api.containers(filters={"ancestor": image}):
        if container["Image"] == PROXY_IMAGE:
            continue
        env = api.inspect_container(container["Id"])["Config"].get("Env") or []
        found += "\n".join(env).encode()
        run = api.exec_create(container["Id"], ["sh", "-c", DUMP], user="1000:1000")
        found += api.exec_start(run["Id"])
    return found


def _session_files(run: Path, trial: Trial) -> dict[str, bytes]:
    """The trial's session as the run directory keeps it: the CLI's logs, its stdout, the
    gateway's line per request."""
    data = gzip.decompress((run / "sessions" / f"{trial.session_sha256}.tar.gz").read_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isreg()}  # type: ignore[union-attr]


@dataclass
class Fleet:
    """compose.yaml under a project of this test: fresh secrets (a model key file among
    them), its own Redis and registry ports; the coordinator's environment on the host."""

    tmp: Path
    compose: str
    key: str
    secrets: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    host_env: dict[str, str] = field(init=False)
    base: list[str] = field(init=False)
    registry: str = field(init=False)

    def __post_init__(self) -> None:
        self.secrets = make_secrets(self.tmp / "secrets")
        (self.secrets / "model-keys").mkdir(mode=0o700)
        self.write_key("", self.key)
        redis_port, registry_port = free_port(), free_port()
        self.registry = f"127.0.0.1:{registry_port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in (KEY_ENV, KEYS_DIR_ENV)},
            "DELTARUN_SECRETS": str(self.secrets),
            "DELTARUN_REDIS_PORT": str(redis_port),
            "DELTARUN_REGISTRY_PORT": str(registry_port),
        }
        project = f"deltarun-test-{secrets.token_hex(4)}"
        self.base = [self.compose, "-f", str(ROOT / "compose.yaml"), "-p", project]
        lines = (self.secrets / "deltarun.env").read_text().splitlines()
        self.host_env = dict(line.split("=", 1) for line in lines if "=" in line)
        url = self.host_env["DELTARUN_BROKER_URL"].replace(":6379/", f":{redis_port}/")
        self.host_env["DELTARUN_BROKER_URL"] = url
        # The coordinator's cache: the agents' artifacts from the user's cache (fetched once).
        cache = self.tmp / "cache"
        cache.mkdir()
        AGENT_CACHE.mkdir(parents=True, exist_ok=True)
        (cache / "agents").symlink_to(AGENT_CACHE)
        self.host_env["DELTARUN_CACHE"] = str(cache)

    @property
    def project(self) -> str:
        return self.base[-1]

    def write_key(self, suffix: str, text: str) -> None:
        (self.secrets / "model-keys" / f"{KEY_ENV}{suffix}").write_text(text + "\n")

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def coordinator(self, controls: Path, out: Path) -> subprocess.Popen[bytes]:
        """``deltarun run --registry`` on the host, without the model key."""
        with (self.tmp / "coordinator.log").open("wb") as log:
            return subprocess.Popen(
                [DELTARUN, "run", str(controls), "--out", str(out), "--registry", self.registry],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, **self.host_env},
            )

    def coordinator_log(self) -> str:
        return (self.tmp / "coordinator.log").read_text(errors="replace")

    def broker(self) -> redis.Redis:
        return redis.Redis.from_url(
            self.host_env["DELTARUN_BROKER_URL"],
            ssl_ca_certs=self.host_env["DELTARUN_BROKER_CA"],
            ssl_certfile=self.host_env["DELTARUN_BROKER_CERT"],
            ssl_keyfile=self.host_env["DELTARUN_BROKER_KEY"],
        )

    def down(self) -> None:
        logs = subprocess.run(
            [*self.base, "logs", "--no-color"], env=self.env, capture_output=True, cwd=ROOT
        )
        (self.tmp / "compose.log").write_bytes(logs.stdout)
        subprocess.run(
            [*self.base, "down", "-v", "--remove-orphans"],
            env=self.env,
            capture_output=True,
            timeout=180,
            cwd=ROOT,
        )


def controls_for(tmp_path: Path, image: str, url: str, network: str) -> Path:
    """Sealed controls: one calc task on ``image``, a control and Codex, priced."""
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "cli", "agent": {"type": "installed", "name": NAME, "version": VERSION}},
    ]
    controls = make_suite(
        tmp_path,
        [{**repo_task("t1", timeout_s=120, prompt=PROMPT), "image": image}],
        arms,
        runtime={"network": "model-only", "model_network": network},
        route={"base_url": url, "model": MODEL, "api_key_env": KEY_ENV},
        seal=False,
    )
    data = yaml.safe_load(controls.read_text())
    data["prices"] = {MODEL: PRICE}
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    seal_target(controls, load_controls)
    return controls


def test_a_fleet_worker_pulls_the_pinned_agent_layer_and_runs_the_cli_with_the_key_at_its_gateway(
    tmp_path: Path, docker_api: Any
) -> None:
    compose = _compose()
    if shutil.which("npm") is None and not (AGENT_CACHE / NAME / VERSION).is_dir():
        message = "npm is not installed; the installed agents are fetched with it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    docker_api.inspect_image("deltarun/worker:latest")  # built by `make worker-images`
    key = "sk-fleet-real-" + secrets.token_hex(16)
    fleet = Fleet(tmp_path, compose, key)
    tag = f"deltarun-test/fleet-installed:{uuid.uuid4().hex[:12]}"
    layer = agent_tag(KINDS[NAME], VERSION, _own_image(docker_api, tag))
    network = f"deltarun-test-fleet-{uuid.uuid4().hex[:10]}"
    docker_api.create_network(network, driver="bridge", labels={"deltarun.test": network})
    host = docker_api.inspect_network(network)["IPAM"]["Config"][0]["Gateway"]
    dumps: list[bytes] = []
    script = Conversation(
        [shell(FIX), Reply("Fixed add().", usage=Usage(2300, 20, 2048))],
        since=PROMPT,
        main=lambda request: bool(request.tool_names),
    )

    def look(request: Request) -> Reply:  # into the sandbox while the CLI waits
        dumps.append(_sandboxes_dump(docker_api, layer))
        return script(request)

    out = tmp_path / "run"
    coordinator: subprocess.Popen[bytes] | None = None
    try:
        fleet.run("up", "-d", "redis", "registry")
        with FakeModels(look, host=host) as fake:
            fleet.write_key(".upstream", fake.url)  # the key goes to this model alone
            coordinator = fleet.coordinator(
                controls_for(tmp_path, tag, fake.url + "/v1", network), out
            )
            # The coordinator layered Codex on the task image, pinned it, pushed it and
            # published the pin: then the engine forgets the layer before any worker exists.
            broker = fleet.broker()

            def published() -> bool:  # Redis may still be starting (compose 1.29 has no --wait)
                try:
                    return bool(broker.hexists(keys.images(), layer))
                except redis.exceptions.ConnectionError:
                    return False

            wait_for(
                lambda: published() or coordinator.poll(),
                240,
                "the coordinator to push and publish the agent layer",
            )
            assert coordinator.poll() is None, fleet.coordinator_log()
            pinned = json.loads((out / "run.json").read_text())["image_digests"][layer]
            docker_api.remove_image(pinned, force=True)
            with pytest.raises(docker.errors.ImageNotFound):
                docker_api.inspect_image(pinned)
            fleet.run("up", "-d", "--scale", "worker=1", "worker")
            assert coordinator.wait(timeout=240) == 0, fleet.coordinator_log()
        assert not fake.errors, fake.errors
        worker_logs = fleet.run("logs", "--no-color", "worker")
        worker = fleet.run("ps", "-q", "worker").split()[0]
        worker_env = docker_api.inspect_container(worker)["Config"]["Env"]
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        fleet.down()
        for image in (layer, tag):
            try:
                docker_api.remove_image(image, force=True)
            except docker.errors.APIError:
                pass
        docker_api.remove_network(network)
    assert _left(docker_api, fleet.project) == []

    # The worker pulled the pinned layer from the registry, and the trial ran from it.
    assert f"pulled {layer} ({pinned[:19]}) from {fleet.registry}/" in worker_logs
    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    trial = Trial.model_validate(next(r for r in records if r["arm"] == "cli"))
    assert trial.image_digest == pinned, (trial.image_digest, pinned)
    assert trial.outcome is Outcome.SUCCESS, (trial.error, trial.reason, trial.agent_log[-3000:])
    assert "+    return a + b" in trial.patch
    # The real CLI: Codex's own session files, its tool call, the Responses API it speaks.
    files = _session_files(out, trial)
    assert any(path.startswith("home/.codex/sessions/") for path in files), sorted(files)
    assert trial.transcript and any(step.get("tool") for step in trial.transcript)
    answered = fake.answered()
    assert answered and all(r.api == "responses" for r in answered), answered
    # Tokens and dollars: what the scripted model billed, as the worker's gateway counted.
    served = fake.served()
    assert (trial.prompt_tokens, trial.completion_tokens) == (served.prompt, served.completion)
    assert trial.cache_read_tokens == served.cache_read
    fresh = served.prompt - served.cache_read
    assert trial.cost_usd == pytest.approx(
        Price(**PRICE).dollars(fresh, served.completion, served.cache_read, 0), abs=1e-6
    )
    # The key: at the model only, from the worker's gateway; never in the coordinator's
    # environment, the worker container's, the sandbox, the run directory or the logs.
    assert all(r.header("authorization") == f"Bearer {key}" for r in answered)
    seen = b"".join(dumps)
    assert PLACEHOLDER_KEY.encode() in seen  # the look did reach the CLI's processes
    assert key.encode() not in seen
    assert all(key not in item for item in worker_env)
    assert key not in fleet.coordinator_log() and key not in worker_logs
    kept = [path for path in out.rglob("*") if path.is_file()]
    assert [path for path in kept if key.encode() in path.read_bytes()] == []
    assert all(key.encode() not in data for data in files.values())
