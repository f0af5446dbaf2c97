"""A hostile suite's environment reaching outside the suite through the engine, on the real
engine, in the default settings: a URL the engine would fetch from this host's loopback
(plainly, split, escaped, through a variable, as an ONBUILD trigger, or as a trigger of
``runtime.image``), a VOLUME that would give every sandbox a writable place on the engine's
disk, and a build step's own network. A loopback HTTP server stands for the host's
services (the only address a test may aim at): it must see no request."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.sandbox.base import ROOT_USER, ExecRequest
from runner.sandbox.docker import DockerSandboxFactory
from tests.adversarial.support import (
    Listener,
    one_line,
    refused_run,
    refused_to_open,
    small_spec,
)
from tests.conftest import leftover_sandboxes, run_cli
from tests.helpers import PY_IMAGE, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker


@pytest.fixture
def images(docker_api: Any) -> Iterator[Callable[[str], str]]:
    """Build an image ``FROM`` the sandbox image plus ``lines`` (and a unique label); every
    image built is removed after. No step comes from the engine's cache: a cached step is
    another build's intermediate image, which that build's removal takes away under this
    one (moby/moby#29011: "unable to find image", seen once in a full run)."""
    made: list[str] = []

    def build(lines: str) -> str:
        text = f"FROM {PY_IMAGE}\n{lines}\nLABEL deltarun.test.hostile={uuid.uuid4().hex}\n"
        image = ""
        context = io.BytesIO(text.encode())
        for event in docker_api.build(fileobj=context, rm=True, nocache=True, decode=True):
            assert "error" not in event, event
            image = (event.get("aux") or {}).get("ID", image)
        made.append(image)
        return image

    yield build
    for image in made:
        docker_api.remove_image(image, force=True)


@pytest.fixture
def environments(docker_api: Any) -> Iterator[list[str]]:
    """The environment names a test builds; their images are removed after."""
    names: list[str] = []
    yield names
    for name in names:
        for image in docker_api.images(filters={"label": f"deltarun.environment={name}"}):
            docker_api.remove_image(image["Id"], force=True)


def env_suite(
    root: Path, dockerfile: str, runtime: dict[str, Any] | None = None, name: str = ""
) -> Path:
    """A one-task suite whose task runs in the environment ``dockerfile`` builds."""
    task = {**repo_task("t1"), "environment": name or f"e{uuid.uuid4().hex[:8]}"}
    del task["image"]
    arms = [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}]
    controls = make_suite(root, [task], arms, seal=False, runtime=runtime)
    folder = root / "suite" / "environments" / task["environment"]
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(dockerfile)
    return controls


HEAD = "ARG BASE\nFROM ${BASE}\n"
FETCHES = {
    "ADD of the URL": "{head}ADD {url} /opt/leak\n",
    "ADD split over lines with a comment between": "{head}AD\\\n# x\nD {url} /opt/leak\n",
    "ADD in JSON with a \\u escape": '{head}ADD ["{json_url}", "/opt/leak"]\n',
    "ADD of a variable": "{head}ARG U={url}\nADD $U /opt/leak\n",
    "an ONBUILD trigger of the environment": "{head}ONBUILD ADD {url} /opt/leak\n",
}


@pytest.mark.parametrize("attack", sorted(FETCHES))
def test_a_suite_build_fetches_nothing_from_the_host(
    tmp_path: Path,
    listener: Listener,
    environments: list[str],
    attack: str,
    held: Callable[..., None],
) -> None:
    json_url = listener.url.replace(":", "\\u003a", 1)
    text = FETCHES[attack].format(head=HEAD, url=listener.url, json_url=json_url)
    environments.append(f"e{uuid.uuid4().hex[:8]}")
    controls = env_suite(tmp_path, text, name=environments[0])
    built = run_cli("build", str(controls))
    line = one_line(built.stderr)
    held(
        f"suite build: {attack}",
        "deltarun build of an environment naming a loopback URL",
        f"exit {built.returncode}; requests the host's server saw: {len(listener.paths)}",
    )
    assert built.returncode == 1 and listener.paths == []
    assert "Dockerfile:" in line and "; " in line  # the file, its line, the fix


def test_a_base_image_s_triggers_never_run_in_the_build(
    tmp_path: Path,
    listener: Listener,
    images: Callable[[str], str],
    environments: list[str],
    held: Callable[..., None],
) -> None:
    """``runtime.image`` carrying ``ONBUILD ADD <url>``: the environment's ``FROM ${BASE}``
    would fire it, with the engine fetching from this host's loopback."""
    base = images(f"ONBUILD ADD {listener.url} /opt/leak")
    environments.append(f"e{uuid.uuid4().hex[:8]}")
    controls = env_suite(tmp_path, HEAD, runtime={"image": base}, name=environments[0])
    built = run_cli("build", str(controls))
    line = one_line(built.stderr)
    held(
        "suite build: runtime.image with an ONBUILD ADD of a loopback URL",
        "deltarun build on that base",
        f"exit {built.returncode}; requests seen: {len(listener.paths)}",
    )
    assert built.returncode == 1 and listener.paths == []
    assert "1 ONBUILD trigger" in line and "runtime.image" in line


def test_a_build_step_has_no_network_unless_asked(tmp_path: Path, environments: list[str]) -> None:
    """By default a build step sees only loopback; ``--network default`` is the user's
    explicit choice (no traffic is sent either way: the step lists its interfaces)."""

    def step() -> str:  # each its own (the engine's build cache ignores the network)
        return HEAD + f'RUN echo {uuid.uuid4().hex} && test "$(ls /sys/class/net)" = lo\n'

    environments.extend(f"e{uuid.uuid4().hex[:8]}" for _ in range(2))
    built = run_cli("build", str(env_suite(tmp_path, step(), name=environments[0])))
    assert built.returncode == 0, built.stderr
    networked = env_suite(tmp_path / "net", step(), name=environments[1])
    on_bridge = run_cli("build", str(networked), "--network", "default")
    assert on_bridge.returncode == 1 and "did not build" in one_line(on_bridge.stderr)


def test_a_build_step_has_a_memory_limit(
    tmp_path: Path, docker_api: Any, environments: list[str], held: Callable[..., None]
) -> None:
    """The engine gives a build step no memory limit of its own, and with swap off a step
    that took the machine's memory would have the kernel kill what it picks on the host.
    By default each step gets half the machine (the step reads its own limit: no memory is
    taken); a step over ``--memory`` is killed within it, and the line says how to give more."""
    half = int(docker_api.info()["MemTotal"]) // 2
    limit = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
    environments.extend(f"e{uuid.uuid4().hex[:8]}" for _ in range(2))
    within = HEAD + f'RUN echo {uuid.uuid4().hex} && test "$({limit})" -le {half}\n'
    built = run_cli("build", str(env_suite(tmp_path, within, name=environments[0])))
    assert built.returncode == 0, built.stderr
    hog = HEAD + f"RUN echo {uuid.uuid4().hex} && python3 -c \"b = b'x' * (256 << 20)\"\n"
    controls = env_suite(tmp_path / "hog", hog, name=environments[1])
    killed = run_cli("build", str(controls), "--memory", "64m")
    line = one_line(killed.stderr)
    held(
        "suite: a build step taking 256m",
        "deltarun build --memory 64m",
        f"exit {killed.returncode}: {line[-120:]}",
    )
    assert killed.returncode == 1 and "non-zero code: 137" in line
    assert "memory limit is 64m" in line and "--memory SIZE" in line


PIDS_MAX = "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"
# A step waits (at most a minute) for the cap the builder gives it once the log names it.
CAPPED = f'i=0; while [ "$({PIDS_MAX})" = max ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done'


def test_a_build_step_cannot_fill_the_process_table(
    tmp_path: Path, environments: list[str], held: Callable[..., None]
) -> None:
    """The engine gives a build step no process limit, and ``ulimit nproc`` does not bind
    root: a step could fork until the machine's process table is full. Each step is capped
    once the build log names it, by default at 4096 (the step reads its own cap); under
    ``--pids 64`` a step starting 200 processes cannot, and the build fails."""
    environments.extend(f"e{uuid.uuid4().hex[:8]}" for _ in range(2))
    within = HEAD + f'RUN echo {uuid.uuid4().hex}; {CAPPED}; test "$({PIDS_MAX})" = 4096\n'
    built = run_cli("build", str(env_suite(tmp_path, within, name=environments[0])))
    assert built.returncode == 0, built.stderr
    many = (
        HEAD + f"RUN echo {uuid.uuid4().hex}; {CAPPED}; "
        "n=0; while [ $n -lt 200 ]; do sleep 60 & n=$((n+1)); done; echo started $n\n"
    )
    controls = env_suite(tmp_path / "many", many, name=environments[1])
    refused = run_cli("build", str(controls), "--pids", "64")
    line = one_line(refused.stderr)
    held(
        "suite: a build step starting 200 processes",
        "deltarun build --pids 64",
        f"exit {refused.returncode}: {line[-100:]}",
    )
    assert refused.returncode == 1 and "fork" in line.lower(), line
    assert "started 200" not in refused.stdout + refused.stderr


def steps_running(docker_api: Any, token: str) -> list[str]:
    """The running containers whose command holds ``token``: build steps left behind."""
    running = docker_api.containers(filters={"status": "running"})
    return [c["Id"][:12] for c in running if token in (c.get("Command") or "")]


def test_a_build_step_that_never_ends_ends_at_the_deadline(
    tmp_path: Path, docker_api: Any, environments: list[str], held: Callable[..., None]
) -> None:
    """The engine gives a build no time limit: a step that prints a line now and then and
    never ends would hold ``deltarun build`` for ever. Past ``--timeout`` the running step
    is killed (nothing of it is left running) and the build is one line saying so."""
    environments.append(f"e{uuid.uuid4().hex[:8]}")
    token = uuid.uuid4().hex
    forever = HEAD + f"RUN echo {token} && while true; do echo alive; sleep 1; done\n"
    controls = env_suite(tmp_path, forever, name=environments[0])
    ended = run_cli("build", str(controls), "--timeout", "4")
    line = one_line(ended.stderr)
    left = steps_running(docker_api, token)
    held(
        "suite: a build step that prints a line a second and never ends",
        "deltarun build --timeout 4",
        f"exit {ended.returncode}; steps left running: {len(left)}; {line[-90:]}",
    )
    assert ended.returncode == 1 and left == []
    assert "the build did not end within 4 s" in line and "--timeout SECONDS" in line
    assert "memory limit" not in line and "no network (the default)" not in line


def test_a_build_cannot_fill_the_engines_disk(
    tmp_path: Path, docker_api: Any, environments: list[str], held: Callable[..., None]
) -> None:
    """The engine gives a build no disk limit (overlay2 has no quota): a step writing
    without end would fill the disk of the engine's machine. Under ``--disk 64m`` such a
    step is killed within seconds, and so is a build whose steps each commit a layer within
    the cap and together go past it; each build fails in one line naming ``--disk``, and
    nothing of it is left running. (``--timeout`` only bounds the test should the cap fail.)"""
    environments.extend(f"e{uuid.uuid4().hex[:8]}" for _ in range(2))
    token = uuid.uuid4().hex
    endless = (
        HEAD + f"RUN echo {token}; while true; do head -c 8388608 /dev/zero >> /tmp/fill; "
        "sleep 0.1; done\n"
    )
    layers = HEAD + "".join(
        f"RUN echo {uuid.uuid4().hex}; head -c 31457280 /dev/zero > /tmp/layer{i}\n"
        for i in range(3)
    )
    lines = []
    for n, dockerfile in enumerate((endless, layers)):
        controls = env_suite(tmp_path / f"s{n}", dockerfile, name=environments[n])
        refused = run_cli("build", str(controls), "--disk", "64m", "--timeout", "240")
        lines.append(one_line(refused.stderr))
        assert refused.returncode == 1, refused.stderr
    left = steps_running(docker_api, token)
    held(
        "suite: a build step writing zeros without end; three 30 MiB layers",
        "deltarun build --disk 64m",
        f"steps left running: {len(left)}; {lines[0][-90:]}",
    )
    assert left == []
    for line in lines:
        assert "the build wrote more than 64m to the engine's disk" in line, line
        assert "--disk SIZE" in line and "did not end within" not in line, line
        assert "memory limit" not in line, line


def test_a_build_steps_output_cannot_name_another_container_as_its_step(
    tmp_path: Path, docker_api: Any, environments: list[str], held: Callable[..., None]
) -> None:
    """The build stream carries the steps' own output beside the builder's lines: a step
    printing `` ---> Running in <id>`` of another container (its ID leaked, say) would have
    had deltarun cap that container's processes and, past the deadline, kill it. A step is
    only a container running on the image the build stands on: the other container keeps
    running, uncapped, while the step itself still ends at the deadline."""
    environments.append(f"e{uuid.uuid4().hex[:8]}")
    bystander = docker_api.create_container(
        PY_IMAGE, ["sleep", "600"], labels={"deltarun.test": "bystander"}
    )["Id"]
    docker_api.start(bystander)
    try:
        forged = HEAD + f'RUN echo " ---> Running in {bystander}"; sleep 600\n'
        controls = env_suite(tmp_path, forged, name=environments[0])
        ended = run_cli("build", str(controls), "--timeout", "5")
        line = one_line(ended.stderr)
        state = docker_api.inspect_container(bystander)
        held(
            "suite: a build step printing the builder's line with another container's ID",
            "deltarun build --timeout 5",
            f"the other container running: {state['State']['Running']}, its pids limit: "
            f"{state['HostConfig'].get('PidsLimit')}; {line[-60:]}",
        )
        assert ended.returncode == 1 and "the build did not end within 5 s" in line, line
        assert state["State"]["Running"] and not state["HostConfig"].get("PidsLimit")
    finally:
        docker_api.remove_container(bystander, force=True)


def test_an_image_with_a_volume_gets_no_sandbox(
    tmp_path: Path, docker_api: Any, images: Callable[[str], str], held: Callable[..., None]
) -> None:
    """``VOLUME /var/tmp`` would give every sandbox 1777 space on the engine's disk beside
    its read-only root, outside every cap: the run stops in one line before any trial,
    and a sandbox of it cannot be opened at all."""
    image = images("VOLUME /var/tmp")
    fill = "dd if=/dev/zero of=/var/tmp/fill bs=1M count=64 && echo filled\n"
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "fill", "agent": write_agent(tmp_path, "fill", fill)},
    ]
    controls = make_suite(tmp_path, [{**repo_task("t1"), "image": image}], arms)
    code, line, trials = refused_run(controls, tmp_path / "run")
    held(
        "suite: an image with VOLUME /var/tmp, an agent filling it",
        "deltarun run of a task on that image",
        f"exit {code}; trials run: {len(trials)}",
    )
    assert code == 1 and trials == [] and "declares VOLUME /var/tmp" in line
    refused_to_open(docker_api, small_spec(image, "volume"), "declares VOLUME /var/tmp")


def test_nothing_of_the_image_s_own_runs_in_a_sandbox(
    docker_api: Any, images: Callable[[str], str], held: Callable[..., None]
) -> None:
    """An image's ENTRYPOINT would wrap the sandbox's sleep and its HEALTHCHECK would run as
    root on the engine's schedule (after the agent's end, during the hidden tests): the
    sandbox runs deltarun's processes only."""
    image = images(
        'ENTRYPOINT ["sh", "-c", "touch /tmp/entrypoint-ran; exec \\"$@\\"", "ep"]\n'
        "HEALTHCHECK --interval=1s CMD touch /tmp/healthcheck-ran"
    )
    spec = small_spec(image, "entry")
    probe = "sleep 2.5; ls /tmp; tr '\\0' ' ' < /proc/1/cmdline"
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        seen = sandbox.run(ExecRequest(argv=["sh", "-c", probe], timeout_s=20)).output.decode()
    held(
        "suite image: an ENTRYPOINT and a 1 s HEALTHCHECK that leave marks as root",
        "a sandbox of the image, looked at after 2.5 s",
        f"/tmp and PID 1: {' '.join(seen.split())}",
    )
    sleep = ["sleep", str(int(spec.lifetime_s) + 30)]  # deltarun's own, and nothing around it
    assert "ran" not in seen and seen.split("\n")[-1].split() == ["/sbin/docker-init", "--", *sleep]
    assert leftover_sandboxes(docker_api, run=spec.labels["run"]) == ([], [])


@pytest.mark.parametrize(
    ("env", "planted"),
    [("LD_LIBRARY_PATH=/opt/lib:", "libz.so.1"), ("LD_PRELOAD=/workspace/libpre.so", "libpre.so")],
)
def test_an_image_s_loader_variables_never_reach_root_commands(
    docker_api: Any,
    images: Callable[[str], str],
    env: str,
    planted: str,
    held: Callable[..., None],
) -> None:
    """``ENV LD_LIBRARY_PATH=/opt/lib:$LD_LIBRARY_PATH`` in an ordinary image leaves an empty
    entry, the working directory: the workspace. A root command of deltarun's (the patch's
    git, the collector, the census) would load a library the agent left there; so would
    ``LD_PRELOAD``. Here the agent leaves one (a copy of a system library, so that loading
    it is visible in the process's maps and harmless)."""
    image = images(f"ENV {env}")
    spec = small_spec(image, "loader", workspace=8 << 20)
    plant = (
        "z=$(ls /lib/*/libz.so.1 /usr/lib/*/libz.so.1 2>/dev/null | head -n 1); "
        f"cp $z /workspace/{planted} && echo planted"
    )
    look = "print(open('/proc/self/maps').read())"
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        done = sandbox.run(ExecRequest(argv=["sh", "-c", plant], timeout_s=20))
        assert done.exit_code == 0 and b"planted" in done.output, done
        python = ["python3", "-I", "-S", "-c", look]
        root = sandbox.run(
            ExecRequest(argv=python, user=ROOT_USER, env={"PATH": "/usr/bin:/bin"}, timeout_s=20)
        )
        agent = sandbox.run(ExecRequest(argv=python, timeout_s=20))
    maps = root.output.decode().splitlines()
    loaded = sorted({line.split()[-1] for line in maps if "/workspace/" in line})
    held(
        f"suite image: ENV {env}",
        f"the agent leaves {planted} in the workspace; a root command of the harness runs",
        f"workspace libraries in root's maps: {loaded}",
    )
    assert root.exit_code == 0 and loaded == [], root
    # The image's environment is still the agent's (and the tests'): only root goes without.
    assert f"/workspace/{planted}".encode() in agent.output


def test_the_sweep_after_the_agent_loads_nothing_the_agent_left(
    docker_api: Any, images: Callable[[str], str], held: Callable[..., None]
) -> None:
    """The sweep that kills the agent's processes before the patch is taken runs as the
    agent's uid with the image's environment; an empty entry of ``LD_LIBRARY_PATH`` names
    its working directory. The agent leaves a broken ``libz.so.1`` in the workspace (which
    would stop a Python started there) and a process that should outlive it."""
    from runner.agents.interface import GUARD_FILE
    from runner.sandbox.base import IO_DIR
    from runner.sandbox_scripts import source
    from runner.trees.archives import single_file_tar
    from runner.trial.workspace import stop_agent

    image = images("ENV LD_LIBRARY_PATH=/opt/lib:")
    spec = small_spec(image, "sweep", workspace=8 << 20, with_io=True)
    leave = "echo broken > /workspace/libz.so.1; setsid sleep 300 >/dev/null 2>&1 & echo left"
    census = 'for p in /proc/[0-9]*; do [ "$(stat -c %u $p)" = 1000 ] && echo "$p"; done; true'
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        guard = single_file_tar(GUARD_FILE.rsplit("/", 1)[1], source("guard.py"), uid=0, gid=0)
        sandbox.put_archive(IO_DIR, guard)
        left = sandbox.run(ExecRequest(argv=["sh", "-c", leave], timeout_s=20))
        assert b"left" in left.output, left
        stop_agent(sandbox)
        alive = sandbox.run(
            ExecRequest(
                argv=["sh", "-c", census],
                user=ROOT_USER,
                env={"PATH": "/usr/bin:/bin"},
                timeout_s=20,
            )
        )
    survivors = alive.output.decode().split()
    held(
        "suite image: ENV LD_LIBRARY_PATH=/opt/lib: (an empty entry)",
        "the agent leaves a broken libz.so.1 in the workspace and a setsid sleep",
        f"processes of the agent's uid after the sweep: {survivors}",
    )
    assert alive.exit_code == 0 and survivors == [], alive
