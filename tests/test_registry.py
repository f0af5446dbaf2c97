"""Images shipped to workers through a real registry (Debian's docker-registry on loopback),
a real Docker engine, real Redis and real `deltarun worker` processes.

Every image a test builds is its own (``FROM`` the sandbox image plus a unique label), so
removing it by ID never touches an image another test or session uses.
"""

from __future__ import annotations

import fcntl
import io
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from runner.distributed import keys, registry
from runner.errors import DigestMismatch, UserError
from tests.conftest import IN_CI, SHARED_REGISTRY, run_cli, session_directory
from tests.distributed_support import (
    Proc,
    RedisServer,
    essence,
    free_port,
    session_key,
    start_worker,
    wait_for,
)
from tests.helpers import PY_IMAGE, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker


class RegistryServer:
    """``docker-registry serve`` on a free loopback port, storage in a temporary directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        storage = self.directory / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        config = self.directory / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn, accesslog: {disabled: true}}\n"
            f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '{self.address}', secret: test}}\n"
        )
        log = (self.directory / "registry.log").open("ab")
        self.process = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                registry.check(self.address)
                return
            except UserError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        raise RuntimeError(
            f"docker-registry did not start: {(self.directory / 'registry.log').read_text()}"
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture(scope="module")
def registry_server(tmp_path_factory: pytest.TempPathFactory, docker_api: Any) -> RegistryServer:
    """One registry for the session, whichever worker runs these tests: the first to need
    it starts it and pushes the sandbox image's layers to it once (~20 s, under a lock the
    others wait on); every later push of an image over the sandbox image mounts them from
    there. Each test's images are its own (unique repositories and labels), so a test sees
    nothing another test pushed under its names. Ended with the session
    (conftest's ``stop_shared_registry``)."""
    if shutil.which("docker-registry") is None:
        message = "docker-registry is not installed; run `make registry`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    shared = session_directory(tmp_path_factory)
    with open(shared / "registry.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = shared / SHARED_REGISTRY
        if state.exists():
            known = json.loads(state.read_text())
            server = RegistryServer(Path(known["directory"]))
            server.port = known["port"]
            try:
                registry.check(server.address)
                return server
            except UserError:
                pass  # it died: start another
        server = RegistryServer(Path(tempfile.mkdtemp(prefix="registry-", dir=shared)))
        server.start()
        assert server.process is not None
        state.write_text(
            json.dumps(
                {"directory": str(server.directory), "port": server.port, "pid": server.process.pid}
            )
        )
        seed = Images(docker_api)
        try:
            tag = unique("seed")
            registry.push(docker_api, tag, seed.build(tag), server.address)
        finally:
            seed.cleanup()
        return server


class Images:
    """Tiny images of this test (the sandbox image plus a unique label), removed by ID."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.ids: set[str] = set()

    def build(self, tag: str) -> str:
        dockerfile = f"FROM {PY_IMAGE}\nLABEL deltarun.test.registry={uuid.uuid4().hex}\n"
        for _ in self.api.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, decode=True
        ):
            pass
        image_id = str(self.api.inspect_image(tag)["Id"])
        self.ids.add(image_id)
        return image_id

    def remove(self, image_id: str) -> None:
        try:
            self.api.remove_image(image_id, force=True)
        except docker.errors.ImageNotFound:
            pass

    def present(self, name: str) -> str | None:
        try:
            return str(self.api.inspect_image(name)["Id"])
        except docker.errors.ImageNotFound:
            return None

    def cleanup(self) -> None:
        for image_id in self.ids:
            self.remove(image_id)


@pytest.fixture
def images(docker_api: Any) -> Iterator[Images]:
    made = Images(docker_api)
    yield made
    made.cleanup()


def unique(name: str) -> str:
    return f"deltarun-test/registry-{name}-{uuid.uuid4().hex[:8]}:1"


class CountingClient:
    """The real Engine client, counting the pushes it was asked for."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.pushes = 0

    def push(self, *args: Any, **kwargs: Any) -> Any:
        self.pushes += 1
        return self.api.push(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def test_push_then_push_again_is_skipped(
    registry_server: RegistryServer, images: Images, docker_api: Any
) -> None:
    tag = unique("push")
    image_id = images.build(tag)
    client = CountingClient(docker_api)
    ref = registry.push(client, tag, image_id, registry_server.address)  # type: ignore[arg-type]
    repository = tag.split(":")[0]
    assert ref.startswith(f"{registry_server.address}/{repository}@sha256:")
    assert client.pushes == 1
    assert registry.held_digest(registry_server.address, tag, image_id) == ref.split("@")[1]
    said: list[str] = []
    again = registry.push(client, tag, image_id, registry_server.address, said.append)  # type: ignore[arg-type]
    assert again == ref and client.pushes == 1
    assert said == [f"{tag} ({image_id[:19]}) already in {registry_server.address}"]


def test_ensure_pulls_a_removed_image_by_digest(
    registry_server: RegistryServer, images: Images, docker_api: Any
) -> None:
    tag = unique("pull")
    image_id = images.build(tag)
    ref = registry.push(docker_api, tag, image_id, registry_server.address)
    images.remove(image_id)
    assert images.present(image_id) is None and images.present(tag) is None
    assert registry.ensure(docker_api, ref, image_id, tag) == "pulled"
    assert images.present(tag) == image_id
    assert registry.ensure(docker_api, ref, image_id, tag) == "present"


def test_another_image_under_the_same_tag_is_refused_by_its_id(
    registry_server: RegistryServer, images: Images, docker_api: Any
) -> None:
    tag = unique("swap")
    address = registry_server.address
    pinned = images.build(tag)
    pinned_ref = registry.push(docker_api, tag, pinned, address)
    other = images.build(tag)  # the same tag, another image: the registry's tag now serves it
    other_ref = registry.push(docker_api, tag, other, address)
    assert other_ref != pinned_ref and pinned != other
    assert registry.held_digest(address, tag, pinned) is None  # a push of `pinned` is not skipped
    images.remove(other)
    images.remove(pinned)

    with pytest.raises(DigestMismatch) as caught:
        registry.ensure(docker_api, other_ref, pinned, tag)
    message = str(caught.value)
    assert pinned in message and other in message and other_ref in message
    assert "\n" not in message
    assert images.present(other) is None  # what was pulled and refused is removed
    assert images.present(tag) is None

    # The digest the run published still names the pinned image, whatever the tag serves now.
    assert registry.ensure(docker_api, pinned_ref, pinned, tag) == "pulled"
    assert images.present(tag) == pinned


def test_registry_down_is_one_line(
    tmp_path: Path, redis_server: RedisServer, docker_api: Any
) -> None:
    closed = f"127.0.0.1:{free_port()}"
    stock = str(docker_api.inspect_image(PY_IMAGE)["Id"])
    with pytest.raises(UserError) as pushed:
        registry.push(docker_api, PY_IMAGE, stock, closed)
    assert closed in str(pushed.value) and "start it" in str(pushed.value)
    with pytest.raises(UserError) as pulled:  # the worker's side: the Engine cannot reach it
        registry.ensure(
            docker_api,
            f"{closed}/deltarun-test/x@sha256:{'0' * 64}",
            "sha256:" + "1" * 64,
            unique("none"),
        )
    assert closed in str(pulled.value) and "ssh -N -L" in str(pulled.value)
    assert "\n" not in str(pulled.value)
    with pytest.raises(UserError, match="HOST:PORT"):
        registry.check_address("http://127.0.0.1:5000")

    controls = make_suite(
        tmp_path,
        [repo_task("t0")],
        [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
    )
    out = tmp_path / "run"
    for args, code in (
        (["--broker", redis_server.url, "--registry", closed], 1),
        (["--registry", closed], 2),
    ):
        result = run_cli("run", str(controls), "--out", str(out), *args)
        assert result.returncode == code, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert (closed if code == 1 else "needs --broker") in result.stderr
        assert not out.exists()


def _suite(root: Path, image: str) -> Path:
    """Two tasks in ``image``: the control misses both, the candidate fixes both."""
    tasks = [{**repo_task(f"t{i}"), "image": image} for i in range(2)]
    fix = write_agent(root, "fix", "sed -i 's/a - b/a + b/' calc/__init__.py\n")
    return make_suite(
        root,
        tasks,
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "fix", "agent": fix},
        ],
    )


def _queues(broker: str) -> dict[str, set[str]]:
    from runner.distributed.celery_app import make_app

    seen = make_app(broker).control.inspect(timeout=1.0).active_queues() or {}
    return {node: {q["name"] for q in queues or []} for node, queues in seen.items()}


def test_worker_without_the_image_pulls_it_and_runs_the_job(
    tmp_path: Path,
    redis_server: RedisServer,
    registry_server: RegistryServer,
    images: Images,
    docker_api: Any,
) -> None:
    tag = unique("e2e")
    image_id = images.build(tag)
    controls = _suite(tmp_path, tag)
    local = run_cli("run", str(controls), "--out", str(tmp_path / "local"), "-j", "2")
    assert local.returncode == 0, local.stderr
    queue = keys.queue_for_image(tag)
    procs: list[Proc] = []
    try:
        # A worker that serves only the stock sandbox image: the run's queue waits.
        procs.append(start_worker(redis_server, tmp_path / "wa.log", "-Q", PY_IMAGE, name="wa"))
        coordinator = Proc(
            [
                "run",
                str(controls),
                "--out",
                str(tmp_path / "run"),
                "--broker",
                redis_server.url,
                "--registry",
                registry_server.address,
            ],
            tmp_path / "coordinator.log",
            env={"DELTARUN_QUEUE_CHECK_S": "2"},
        )
        procs.append(coordinator)
        client = redis_server.client()
        entry = wait_for(
            lambda: registry.published(client, session_key()).get(tag),
            120,
            "the run to publish its image",
        )
        assert entry.id == image_id
        assert entry.ref.startswith(f"{registry_server.address}/{tag.split(':')[0]}@sha256:")
        images.remove(image_id)  # the worker to come lacks it
        assert images.present(tag) is None

        warning = wait_for(
            lambda: next((ln for ln in coordinator.text().splitlines() if queue in ln), None),
            60,
            "the unserved-queue warning",
        )
        assert "no live worker consumes it" in warning and f"image {tag}" in warning
        assert "@wa (" in warning and keys.queue_for_image(PY_IMAGE) in warning

        wb = start_worker(
            redis_server,
            tmp_path / "wb.log",
            "-c",
            "2",
            name="wb",
            env={"DELTARUN_IMAGE_POLL_S": "1"},
        )
        procs.append(wb)
        assert coordinator.wait(timeout=240) == 0, coordinator.text()
        assert f"pulled {tag} ({image_id[:19]}) from {entry.ref}" in wb.text()
        assert images.present(tag) == image_id
        assert coordinator.text().count(queue) == 1  # warned once
        assert essence(tmp_path / "run") == essence(tmp_path / "local")
        records = [ln for ln in (tmp_path / "run" / "trials.jsonl").read_text().splitlines() if ln]
        assert len(records) == 4 and all('"worker":"wb"' in r.replace(" ", "") for r in records)
        # The run's archives came to the worker from the registry, never through Redis.
        assert not list(client.scan_iter(match=keys.blob("*")))

        # Published later: the worker's thread pulls, checks and starts consuming the queue of
        # a good pin, and refuses a pin the registry's image does not match.
        images.remove(image_id)
        late, bad = unique("late"), unique("bad")
        wrong = "sha256:" + "0" * 64
        registry.publish(
            client,
            {
                late: registry.Published(image_id, entry.ref),
                bad: registry.Published(wrong, entry.ref),
            },
            session_key(),
        )
        # An entry someone wrote to Redis without the job key: never pulled nor served.
        forged = unique("forged")
        client.hset(keys.images(), forged, json.dumps({"id": image_id, "ref": entry.ref}))
        node = wait_for(
            lambda: next(
                (
                    n
                    for n, qs in _queues(redis_server.url).items()
                    if keys.queue_for_image(late) in qs
                ),
                None,
            ),
            60,
            "the worker to consume the late image's queue",
        )
        assert node.endswith("@wb")
        assert images.present(late) == image_id
        assert forged not in registry.published(client, session_key())
        assert keys.queue_for_image(forged) not in _queues(redis_server.url)[node]
        refusal = wait_for(
            lambda: next(
                (ln for ln in wb.text().splitlines() if "not served" in ln and bad in ln), None
            ),
            30,
            "the refusal of the wrong pin",
        )
        assert wrong in refusal and image_id in refusal
        assert keys.queue_for_image(bad) not in _queues(redis_server.url)[node]

        # Pinned anew to an image the registry does not serve: the worker stops consuming it.
        repinned = {late: registry.Published("sha256:" + "3" * 64, entry.ref)}
        registry.publish(client, repinned, session_key())
        wait_for(
            lambda: keys.queue_for_image(late) not in _queues(redis_server.url)[node],
            30,
            "the worker to stop consuming a queue whose pin it refuses",
        )
    finally:
        for proc in procs:
            proc.stop()


def test_git_suite_with_two_environments_on_a_worker_that_has_no_suite_image(
    tmp_path: Path,
    redis_server: RedisServer,
    registry_server: RegistryServer,
    docker_api: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 13's whole path: git-tree fixtures, two environments built from the suite, the
    images shipped through the registry to a worker that starts without them; the report
    equals the local run's."""
    from tests.test_environments import ENV_FIXTURE, ENV_GOLD, ENVMARK_DOCKERFILE, write_env
    from tests.test_gitfixture import bundle, make_repo

    monkeypatch.setenv("DELTARUN_CACHE", str(tmp_path / "cache"))
    names = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    repo, commits = make_repo(tmp_path / "work", [ENV_FIXTURE])
    suite = tmp_path / "suite"
    bundle(repo, suite / "repos" / "calc.bundle")
    tasks = []
    for i, name in enumerate(names):
        task = {**repo_task(f"e{i}"), "environment": name}
        del task["image"]
        task["repo"] = {"git": "repos/calc.bundle", "commit": commits[0]}
        tasks.append(task)
        write_env(
            suite,
            name,
            ENVMARK_DOCKERFILE,
            {"envmark.py": f"# {uuid.uuid4()}\n" + "def plus(a, b):\n    return a + b\n"},
        )
    gold = tmp_path / "gold"
    gold.mkdir()
    for task in tasks:
        (gold / f"{task['id']}.diff").write_text(ENV_GOLD)
    controls = make_suite(
        tmp_path,
        tasks,
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
        ],
        seal=False,
    )
    built_ids: list[str] = []
    procs: list[Proc] = []
    try:
        built = run_cli("build", str(controls), "--network", "none")
        assert built.returncode == 0, built.stderr
        lines = [json.loads(line) for line in (suite / "tasks.jsonl").read_text().splitlines()]
        built_ids = [line["environment_image"] for line in lines]
        assert len(set(built_ids)) == 2
        local = run_cli("run", str(controls), "--out", str(tmp_path / "local"), "-j", "2")
        assert local.returncode == 0, local.stderr

        coordinator = Proc(
            [
                "run",
                str(controls),
                "--out",
                str(tmp_path / "dist"),
                "--broker",
                redis_server.url,
                "--registry",
                registry_server.address,
            ],
            tmp_path / "coordinator.log",
        )
        procs.append(coordinator)
        client = redis_server.client()
        tags = {line["id"]: environment_tag_of(line) for line in lines}
        wait_for(
            lambda: all(registry.published(client, session_key()).get(t) for t in tags.values()),
            180,
            "the run to publish both environment images",
        )
        for image_id in built_ids:  # the worker to come has neither image
            docker_api.remove_image(image_id, force=True)
        worker = start_worker(
            redis_server,
            tmp_path / "worker.log",
            "-c",
            "2",
            env={"DELTARUN_IMAGE_POLL_S": "1"},
        )
        procs.append(worker)
        assert coordinator.wait(timeout=300) == 0, coordinator.text()
        for tag, image_id in zip(tags.values(), built_ids, strict=True):
            assert docker_api.inspect_image(tag)["Id"] == image_id  # pulled, same image
    finally:
        for proc in procs:
            proc.stop()
        for image_id in built_ids:
            try:
                docker_api.remove_image(image_id, force=True)
            except docker.errors.ImageNotFound:
                pass
    assert essence(tmp_path / "dist") == essence(tmp_path / "local")
    verdicts = {
        (r["arm"], r["task_id"]): r["outcome"]
        for r in map(json.loads, (tmp_path / "dist" / "trials.jsonl").read_text().splitlines())
    }
    assert verdicts == {
        ("gold", "e0"): "success",
        ("gold", "e1"): "success",
        ("ctrl", "e0"): "miss",
        ("ctrl", "e1"): "miss",
    }


def environment_tag_of(line: dict[str, Any]) -> str:
    from runner.records import environment_tag

    return environment_tag(line["environment"], line["environment_sha256"])
