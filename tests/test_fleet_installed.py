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
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import redis
import yaml

from runner.agents.installed.catalogue import KINDS
from runner.agents.installed.kind import PLACEHOLDER_KEY
from runner.agents.installed.layer import agent_tag
from runner.config.loader import load_controls
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
    secrets_dir = make_secrets(tmp_path / "secrets")
    key = "sk-fleet-real-" + secrets.token_hex(16)
    keys_dir = secrets_dir / "model-keys"
    keys_dir.mkdir(mode=0o700)
    (keys_dir / KEY_ENV).write_text(key + "\n")
    project = f"deltarun-test-{secrets.token_hex(4)}"
    redis_port, registry_port = free_port(), free_port()
    env = {
        **os.environ,
        "DELTARUN_SECRETS": str(secrets_dir),
        "DELTARUN_REDIS_PORT": str(redis_port),
        "DELTARUN_REGISTRY_PORT": str(registry_port),
    }
    env.pop(KEY_ENV, None)
    base = [compose, "-f", str(ROOT / "compose.yaml"), "-p", project]

    def run(*args: str) -> str:
        done = subprocess.run(
            [*base, *args], env=env, capture_output=True, text=True, timeout=180, cwd=ROOT
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    tag = f"deltarun-test/fleet-installed:{uuid.uuid4().hex[:12]}"
    base_id = _own_image(docker_api, tag)
    layer = agent_tag(KINDS[NAME], VERSION, base_id)
    network = f"deltarun-test-fleet-{uuid.uuid4().hex[:10]}"
    docker_api.create_network(network, driver="bridge", labels={"deltarun.test": network})
    host = docker_api.inspect_network(network)["IPAM"]["Config"][0]["Gateway"]
    dumps: list[bytes] = []

    def look(request: Request) -> Reply:  # into the sandbox while the CLI waits
        dumps.append(_sandboxes_dump(docker_api, layer))
        return script(request)

    script = Conversation(
        [shell(FIX), Reply("Fixed add().", usage=Usage(2300, 20, 2048))],
        since=PROMPT,
        main=lambda request: bool(request.tool_names),
    )
    host_env = dict(
        line.split("=", 1)
        for line in (secrets_dir / "deltarun.env").read_text().splitlines()
        if "=" in line
    )
    host_env["DELTARUN_BROKER_URL"] = host_env["DELTARUN_BROKER_URL"].replace(
        ":6379/", f":{redis_port}/"
    )
    # The coordinator's cache: the agents' artifacts from the user's cache (fetched once).
    cache = tmp_path / "cache"
    cache.mkdir()
    AGENT_CACHE.mkdir(parents=True, exist_ok=True)
    (cache / "agents").symlink_to(AGENT_CACHE)
    host_env["DELTARUN_CACHE"] = str(cache)
    coordinator: subprocess.Popen[bytes] | None = None
    registry = f"127.0.0.1:{registry_port}"

    def coordinator_log() -> str:
        return (tmp_path / "coordinator.log").read_text(errors="replace")

    try:
        run("up", "-d", "redis", "registry")
        with FakeModels(look, host=host) as fake:
            controls = make_suite(
                tmp_path,
                [{**repo_task("t1", timeout_s=120, prompt=PROMPT), "image": tag}],
                [
                    {
                        "name": "ctrl",
                        "control": True,
                        "agent": {"type": "scripted", "action": "noop"},
                    },
                    {
                        "name": "cli",
                        "agent": {"type": "installed", "name": NAME, "version": VERSION},
                    },
                ],
                runtime={"network": "model-only", "model_network": network},
                route={"base_url": fake.url + "/v1", "model": MODEL, "api_key_env": KEY_ENV},
                seal=False,
            )
            data = yaml.safe_load(controls.read_text())
            data["prices"] = {MODEL: {"input": 3.0, "output": 15.0, "cache_read": 0.3}}
            controls.write_text(yaml.safe_dump(data, sort_keys=False))
            seal_target(controls, load_controls)
            out = tmp_path / "run"
            log = (tmp_path / "coordinator.log").open("wb")
            coordinator = subprocess.Popen(
                [DELTARUN, "run", str(controls), "--out", str(out), "--registry", registry],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in {**os.environ, **host_env}.items() if k != KEY_ENV},
            )
            # The coordinator layered Codex on the task image, pinned it, pushed it and
            # published the pin: then the engine forgets the layer before any worker exists.
            broker = redis.Redis.from_url(
                host_env["DELTARUN_BROKER_URL"],
                ssl_ca_certs=host_env["DELTARUN_BROKER_CA"],
                ssl_certfile=host_env["DELTARUN_BROKER_CERT"],
                ssl_keyfile=host_env["DELTARUN_BROKER_KEY"],
            )
            wait_for(
                lambda: broker.hexists(keys.images(), layer) or coordinator.poll(),
                240,
                "the coordinator to push and publish the agent layer",
            )
            assert coordinator.poll() is None, coordinator_log()
            pinned = json.loads((out / "run.json").read_text())["image_digests"][layer]
            docker_api.remove_image(pinned, force=True)
            with pytest.raises(docker.errors.ImageNotFound):
                docker_api.inspect_image(pinned)

            run("up", "-d", "--scale", "worker=1", "worker")
            assert coordinator.wait(timeout=240) == 0, coordinator_log()
        assert not fake.errors, fake.errors
        worker_logs = run("logs", "--no-color", "worker")
        worker = run("ps", "-q", "worker").split()[0]
        worker_env = docker_api.inspect_container(worker)["Config"]["Env"]
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        (tmp_path / "worker.log").write_text(
            subprocess.run(
                [*base, "logs", "--no-color"], env=env, capture_output=True, text=True
            ).stdout
        )
        subprocess.run(
            [*base, "down", "-v", "--remove-orphans"],
            env=env,
            capture_output=True,
            timeout=180,
            cwd=ROOT,
        )
        for image in (layer, tag):
            try:
                docker_api.remove_image(image, force=True)
            except docker.errors.APIError:
                pass
        docker_api.remove_network(network)
    assert _left(docker_api, project) == []

    # The worker pulled the pinned layer from the registry, and the trial ran from it.
    assert f"pulled {layer} ({pinned[:19]}) from 127.0.0.1:{registry_port}/" in worker_logs
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
    dollars = (fresh * 3.0 + served.completion * 15.0 + served.cache_read * 0.3) / 1e6
    assert trial.cost_usd == pytest.approx(dollars, abs=1e-6)
    # The key: at the model only, from the worker's gateway; never in the coordinator's
    # environment, the worker container's, the sandbox, the run directory or the logs.
    for request in answered:
        assert request.header("authorization") == f"Bearer {key}"
    seen = b"".join(dumps)
    assert PLACEHOLDER_KEY.encode() in seen  # the look did reach the CLI's processes
    assert key.encode() not in seen
    assert all(key not in item for item in worker_env)
    assert key not in coordinator_log() and key not in worker_logs
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert all(key.encode() not in data for data in files.values())
