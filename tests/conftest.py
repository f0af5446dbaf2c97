"""Shared fixtures. Docker tests use the real engine; with CI=true a missing engine fails."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from tests import cli_forkserver
from tests.helpers import PY_IMAGE

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The Docker engine, its sandboxes and this host are shared by every test of every session
# on this machine (pytest-xdist workers, another engineer's run): the lock files of
# ``engine_lock`` live beside them, not in a session's temporary directory.
_LOCKS = Path(tempfile.gettempdir()) / f"deltarun-tests-{os.getuid()}"


@contextmanager
def engine_lock(exclusive: bool) -> Iterator[None]:
    """Shared by every test, exclusive for an ``@pytest.mark.exclusive`` one: an exclusive
    test starts once the tests running have ended, and none starts before it ends.

    A readers-writer lock on two files (``flock``, released by the kernel if a process
    dies): a test waiting for the exclusive lock holds the turnstile, so tests that arrive
    after it queue behind it instead of starving it.
    """
    _LOCKS.mkdir(mode=0o700, exist_ok=True)
    with open(_LOCKS / "turnstile", "a") as turnstile, open(_LOCKS / "engine", "a") as engine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(engine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(engine, fcntl.LOCK_UN)


@contextmanager
def path_lock(name: str) -> Iterator[None]:
    """One holder at a time of ``name`` on this machine: for a path outside tmp_path that
    tests write (a builder writing examples/ in place while another test reads it)."""
    _LOCKS.mkdir(mode=0o700, exist_ok=True)
    with open(_LOCKS / f"path-{name}", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# The longest tests (module::function, every parametrization alike) and the seconds
# `make test` measured for each (--durations, mean of its last runs, 3 or 4 workers on 2 cores):
# handed out longest first, so that the run never ends on one of them on one worker while
# the others idle. The Makefile's --maxschedchunk=1 hands tests out one by one in order.
LONGEST = {
    "test_realprojects.py::test_a_real_project_suite_imports_builds_and_validates": 63,
    "test_field_shapes.py::test_django_and_sympy_instances_import_validate_and_publish": 46,
    "test_bench_smoke.py::test_pacing_smoke": 43,
    "test_copy_free_room.py::test_any_edits_near_the_cap_give_the_same_patch_and_verdict_on_both_paths": 43,
    "test_registry.py::test_worker_without_the_image_pulls_it_and_runs_the_job": 39,
    "test_model_gateway.py::test_bodies_held_open_cannot_starve_the_proxy": 38,
    "test_quickstart.py::test_quickstart_gold_passes_control_fails": 37,
    "test_fleet_installed.py::test_a_fleet_worker_pulls_the_pinned_agent_layer_and_runs_the_cli_with_the_key_at_its_gateway": 35,
    "test_bench_fleet.py::test_fleet_smoke": 32,
    "test_sandbox_io.py::test_silence_past_the_clients_read_timeout_is_no_error": 30,
    "test_docker_stall.py::test_an_engine_that_answers_nothing_is_an_infra_error_not_a_timeout": 29,
    "test_model_only.py::test_the_sandbox_reaches_nothing_but_the_gateway": 28,
    "test_python_bases.py::test_a_spec_pinning_python_39_builds_on_bullseye_and_grades": 27,
    "test_distributed.py::test_duplicate_delivery_is_skipped_not_counted": 27,
    "test_canaries_and_install.py::test_what_the_install_step_leaves_never_reaches_the_verdict": 26,
    "test_rate_limits_docker.py::test_two_workers_share_the_routes_rate": 25,
    "test_gateway_hostile_more.py::test_idle_connections_cannot_take_every_thread": 25,
    "test_export.py::test_kit_reverifies_and_reruns_with_every_original_gone": 24,
    "test_validate.py::test_every_broken_kind_gets_its_verdict": 24,
    "test_run_cli.py::test_interrupted_run_resumes_each_job_once": 23,
    "test_pacing_worker.py::test_auto_worker_starts_low_raises_and_status_says_why": 23,
    "test_rate_limits_docker.py::test_a_local_run_keeps_the_route_under_its_rate": 23,
    "test_docker_stall.py::test_stalled_engine_is_an_infra_error_and_the_worker_goes_on": 23,
    "test_view_runs.py::test_reverify_keeps_what_changed_and_the_viewer_filters_it": 22,
    "test_sandbox_death.py::test_code_under_test_that_exhausts_the_verify_sandbox_is_no_error": 22,
    "test_compose.py::test_compose_runs_a_suite_on_two_tls_workers_and_leaves_nothing": 21,
    "test_ledger.py::test_hostile_arms_leave_the_ledger_whole": 21,
    "test_registry.py::test_git_suite_with_two_environments_on_a_worker_that_has_no_suite_image": 21,
    "test_gate_baseline.py::test_a_pull_request_is_gated_against_the_last_accepted_run": 20,
    "test_until_decided_docker.py::test_a_better_candidate_stops_at_look_2_on_celery_workers": 19,
    "test_distributed_containers.py::test_three_worker_containers_one_killed": 19,
    "test_sandbox_io.py::test_code_under_test_stopping_the_harness_is_a_timeout": 18,
    "test_sandbox_io.py::test_stopping_the_harness_is_the_agents_timeout": 18,
    "test_security.py::test_a_tls_fleet_runs_only_jobs_signed_with_its_key": 17,
    "test_installed_e2e.py::test_a_skill_reaches_the_on_leg_only_and_no_other_host_is_reachable": 17,
    "test_distributed.py::test_coordinator_killed_and_restarted": 17,
    "test_distributed.py::test_redis_restart_with_jobs_queued_and_in_flight": 16,
    "test_bench_smoke.py::test_fixtures_smoke": 16,
    "test_install_step.py::test_the_install_step_runs_in_both_sandboxes_and_a_broken_setup_is_setup_broken": 16,
}
# Then the other tests of these modules (their tests take ten seconds or more each), in
# this order; the rest as collected.
SLOW_FIRST = (
    "test_realprojects.py",
    "test_python_bases.py",
    "test_field_shapes.py",
    "test_installed_e2e.py",
    "test_quickstart.py",
    "test_validate.py",
    "test_distributed.py",
    "test_registry.py",
    "test_run_cli.py",
    "test_export.py",
    "test_install_step.py",
    "test_canaries_and_install.py",
    "test_model_only.py",
    "test_compose.py",
    "test_pack30.py",
    "test_scorecard.py",
    "test_distributed_containers.py",
    "test_docker_stall.py",
    "test_sandbox_io.py",
    "test_copy_free_room.py",
    "test_model_gateway.py",
    "test_ledger.py",
    "test_swebench.py",
)
# Its tests go out right after the longest one: it builds the bullseye base (debootstrap)
# once for the others (test_python_bases.py).
FIRST = "test_instance_images.py"


# Of the longest tests, those that mostly wait (a stalled engine, a silent sandbox, bodies
# held open: under 0.1 CPU-s per second of their time, measured alone). Two of them side by
# side leave a core idle for half a minute (measured: 62% busy while three ran at once),
# so they go out spread among the others, WAIT_GAP tests apart.
WAITING = {
    "test_model_gateway.py::test_bodies_held_open_cannot_starve_the_proxy",
    "test_sandbox_io.py::test_silence_past_the_clients_read_timeout_is_no_error",
    "test_docker_stall.py::test_an_engine_that_answers_nothing_is_an_infra_error_not_a_timeout",
    "test_docker_stall.py::test_stalled_engine_is_an_infra_error_and_the_worker_goes_on",
}
WAIT_GAP = 8


def schedule_name(item: pytest.Item) -> str:
    """How the schedule names a test: its file's name and its function's (every
    parametrization alike)."""
    return f"{item.path.name}::{getattr(item, 'originalname', item.name)}"


def spread_waiting(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` (in schedule order) with the ``WAITING`` tests taken out and put back
    ``WAIT_GAP`` tests apart, the first right after the first long test."""
    waiting = [item for item in items if schedule_name(item) in WAITING]
    rest = [item for item in items if schedule_name(item) not in WAITING]
    first = sum(1 for item in rest if item.get_closest_marker("exclusive")) + 1
    for k, item in enumerate(waiting):
        rest.insert(min(first + k * (WAIT_GAP + 1), len(rest)), item)
    return rest


def schedule_key(item: pytest.Item) -> tuple[int, int, float]:
    """The ``exclusive`` tests first (each runs alone: at the start no long test is in
    flight for it to wait on while the other workers idle), then the ``LONGEST`` tests
    longest first (``FIRST`` after the first of them), the other tests of ``SLOW_FIRST``
    (in its order), the rest (the sort is stable: as collected)."""
    if item.get_closest_marker("exclusive") is not None:
        return (0, 0, 0)
    name = item.path.name
    if name == FIRST:
        return (1, 1, -max(LONGEST.values()) + 1)
    seconds = LONGEST.get(schedule_name(item))
    if seconds is not None:
        return (1, 1, -seconds)
    if name in SLOW_FIRST:
        return (1, 2, SLOW_FIRST.index(name))
    return (1, 3, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=schedule_key)
    items[:] = spread_waiting(items)
    _EXCLUSIVE_TESTS[:] = [i.nodeid for i in items if i.get_closest_marker("exclusive")]


# This session's ``exclusive`` tests (every xdist worker collects them all). Under xdist no
# other test starts before they all ran: a worker that took a long test between two of
# them would hold every other worker idle, queued behind the next exclusive one, for as
# long as the long test runs (about a minute at the start of a run, measured).
_EXCLUSIVE_TESTS: list[str] = []
# Then a test starts anyway: a worker lost with one queued, or an order that queued one
# behind this test on its worker (the sort puts them first in every worker's queue).
EXCLUSIVE_WAIT_S = 180.0


def _exclusive_done_dir(config: pytest.Config) -> Path | None:
    """Where this xdist session's workers mark its exclusive tests run (in the session's
    temporary directory, above each worker's); None without xdist (one process runs them
    first, in order)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if not hasattr(config, "workerinput") or factory is None:
        return None
    return Path(factory.getbasetemp()).parent / "exclusive-tests-run"


def _mark(done: Path, nodeid: str) -> Path:
    return done / hashlib.sha256(nodeid.encode()).hexdigest()[:32]


def _wait_for_exclusive_tests(done: Path) -> None:
    deadline = time.monotonic() + EXCLUSIVE_WAIT_S
    while time.monotonic() < deadline:
        if all(_mark(done, nodeid).exists() for nodeid in _EXCLUSIVE_TESTS):
            return
        time.sleep(0.2)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In CI (``CI=true``) a skipped test is a failed one: every service and tool a test
    needs is installed by ``.ci/run``, so a skip there is a missing part, never a pass."""
    report = yield
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CI=true), which installs everything: {report.longrepr}"
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Each test holds ``engine_lock`` from its set-up (the module and session fixtures it
    starts included) to its teardown; under xdist, a test that is not ``exclusive`` starts
    once this session's exclusive tests all ran (``_EXCLUSIVE_TESTS``)."""
    exclusive = item.get_closest_marker("exclusive") is not None
    done = _exclusive_done_dir(item.config)
    if done is not None and not exclusive:
        _wait_for_exclusive_tests(done)
    try:
        with engine_lock(exclusive):
            _EXCLUSIVE[0] = exclusive
            try:
                return (yield)
            finally:
                _EXCLUSIVE[0] = False
    finally:
        if done is not None and exclusive:
            done.mkdir(parents=True, exist_ok=True)
            _mark(done, item.nodeid).touch()


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One deltarun cache for the test session (git repositories, blobs, staged fixtures),
    never the user's own; the processes tests start inherit it."""
    root = tmp_path_factory.mktemp("deltarun-cache")
    previous = os.environ.get("DELTARUN_CACHE")
    os.environ["DELTARUN_CACHE"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("DELTARUN_CACHE", None)
    else:
        os.environ["DELTARUN_CACHE"] = previous


@pytest.fixture(scope="session", autouse=True)
def session_job_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One job key for the session's coordinators and workers (never the user's own
    ~/.config/deltarun/job.key), and no broker taken from the user's environment."""
    key = "test-" + os.urandom(24).hex()
    path = tmp_path_factory.mktemp("job-key") / "job.key"
    path.write_text(key + "\n")
    path.chmod(0o600)
    names = ("DELTARUN_JOB_KEY_FILE", "DELTARUN_JOB_KEY", "DELTARUN_BROKER_URL")
    previous = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.pop(name, None)
    os.environ["DELTARUN_JOB_KEY_FILE"] = str(path)
    yield key
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _docker_problem() -> str | None:
    try:
        import docker

        client = docker.APIClient(version="auto", timeout=10, **docker.utils.kwargs_from_env())
        client.ping()
        client.inspect_image(PY_IMAGE)
    except Exception as exc:  # any failure means: no usable engine or image
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def docker_api() -> Iterator[object]:
    """A low-level Docker client; skips on a laptop without Docker, fails in CI."""
    problem = _docker_problem()
    if problem is not None:
        message = f"Docker engine or image {PY_IMAGE} unavailable ({problem}); run `make images`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    import docker

    yield docker.APIClient(version="auto", timeout=60, **docker.utils.kwargs_from_env())


_TEST_STARTED = [0.0]
_EXCLUSIVE = [False]  # whether the test running holds the exclusive engine_lock


@pytest.fixture(autouse=True)
def _test_clock() -> None:
    """When this test began: leak checks count only what it created."""
    _TEST_STARTED[0] = time.time()


def _since_test_start(created: int | str) -> bool:
    """Docker reports containers' creation in epoch seconds, volumes' and networks' in RFC 3339."""
    if isinstance(created, str):
        moment = datetime.fromisoformat(created)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        created = int(moment.timestamp())
    return created >= int(_TEST_STARTED[0])


def _label(run: str | None, owner: str | None) -> str:
    """The label filter of ``leftover_sandboxes``: the run's, the owner's, or every sandbox's
    (only an exclusive test sees no other session's sandboxes)."""
    if run is not None:
        return f"deltarun.run={run}"
    if owner is not None:
        return f"deltarun.pid={owner}"
    assert _EXCLUSIVE[0], "name the run or the owner, or mark the test exclusive"
    return "deltarun.deadline"


def leftover_sandboxes(
    api: object, run: str | None = None, owner: str | None = None
) -> tuple[list[str], list[str]]:
    """Labelled containers and volumes that outlived a trial of this test: of ``run``, or of
    the process ``owner`` (``CliResult.owner``: its preflight and gateways too).

    Only what was created since the test began counts: a sandbox a killed earlier
    session left behind (removed by ``deltarun gc`` once past its deadline) is not
    this test's leak, and one leak fails one test, not every later one.
    """
    label = _label(run, owner)
    containers = [
        c["Id"][:12]
        for c in api.containers(all=True, filters={"label": label})  # type: ignore[attr-defined]
        if _since_test_start(c["Created"])
    ]
    volumes = [
        v["Name"]
        for v in (api.volumes(filters={"label": label}) or {}).get("Volumes") or []  # type: ignore[attr-defined]
        if _since_test_start(v["CreatedAt"])
    ]
    return containers, volumes


def leftover_networks(api: object, run: str | None = None, owner: str | None = None) -> list[str]:
    """Labelled networks created since the test began that are still there (as above)."""
    label = _label(run, owner)
    return [
        n["Name"]
        for n in api.networks(filters={"label": label})  # type: ignore[attr-defined]
        if _since_test_start(n["Created"])
    ]


class CliResult(subprocess.CompletedProcess[str]):
    """A finished `deltarun` command and ``owner``, the ``deltarun.pid`` label (pid and start
    time) of what it created: a leak check of its own, whatever other tests run."""

    owner: str


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> CliResult:
    """Run the real `deltarun` command in a process of its own: forked from this test
    process's fork server for the environment (``tests/cli_forkserver.py``: the imports
    paid once), or a subprocess of the console script (an environment's first command, or
    every command with ``DELTARUN_TEST_FORKSERVER=0``)."""
    from runner.sandbox.labels import process_identity

    exe = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    forking = cli_forkserver.enabled() and exe.exists()
    server = cli_forkserver.server_for(exe, full_env) if forking else None
    if server is not None:
        owner, code, stdout, stderr = server.run(args, cwd, timeout, full_env)
        forked = CliResult([str(exe), *args], code, stdout, stderr)
        forked.owner = owner
        return forked
    command = [str(exe)] if exe.exists() else ["deltarun"]
    with subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=full_env,
    ) as process:
        owner = process_identity(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    result = CliResult(process.args, process.returncode, stdout, stderr)
    result.owner = owner
    return result


def session_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary directory, shared by its pytest-xdist workers (each has its
    own below it): what one worker makes there for the others."""
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared


def made_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]
) -> Path:
    """The directory ``make`` fills, made once per session by the first pytest-xdist worker
    to need it while the others wait (a module-scoped fixture would be made again on every
    worker its tests go to). Read-only: a test that changes it works on its own copy."""
    shared = session_directory(tmp_path_factory)
    with open(shared / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made, marker = shared / name, shared / f"{name}.made"
        if not marker.exists():  # made where it stays: what it holds may name its own path
            shutil.rmtree(made, ignore_errors=True)
            made.mkdir()
            make(made)
            marker.touch()
        return made


# The session's registry (tests/test_registry.py, registry_server): directory, port, pid.
SHARED_REGISTRY = "registry.json"


def stop_shared_registry(directory: Path) -> None:
    """End the session's registry, if one was started in ``directory``."""
    state = directory / SHARED_REGISTRY
    if not state.exists():
        return
    known = json.loads(state.read_text())
    state.unlink()
    try:
        command = Path(f"/proc/{known['pid']}/cmdline").read_bytes()
    except OSError:
        return  # gone already
    if b"docker-registry" in command and known["directory"].encode() in command:
        os.kill(known["pid"], signal.SIGTERM)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """End this process's `deltarun` fork servers; in the process that runs the session
    (never a pytest-xdist worker, which could end while another still uses them), end what
    the session's tests shared."""
    cli_forkserver.close_all()
    factory = getattr(session.config, "_tmp_path_factory", None)
    if hasattr(session.config, "workerinput") or factory is None:
        return
    stop_shared_registry(factory.getbasetemp())


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory, docker_api: object) -> dict[str, object]:
    """The local executor's report on the deterministic suite of the distribution tests:
    made once per session, by the first of its pytest-xdist workers to need it."""
    from tests.distributed_support import essence, slow_suite

    shared = session_directory(tmp_path_factory)
    with open(shared / "reference.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "reference.json"
        if made.exists():
            return dict(json.loads(made.read_text()))
        root = tmp_path_factory.mktemp("reference")
        controls = slow_suite(root, sleep_s=0.5)
        result = run_cli("run", str(controls), "--out", str(root / "run"), "-j", "2")
        assert result.returncode == 0, result.stderr
        report = essence(root / "run")
        made.write_text(json.dumps(report))
        return report


_ROOT = Path(__file__).resolve().parents[1]
PROXY_IMAGE = "deltarun/model-proxy:bookworm"


@pytest.fixture(scope="session")
def proxy_image(docker_api: Any) -> str:
    """The proxy image, (re)built by scripts/build-images.sh when missing or stale."""
    code = sorted((_ROOT / "runner/gateway").glob("*.py"), key=lambda p: p.name.encode())
    sources = [_ROOT / "worker_images/proxy/Dockerfile", *code]
    want = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    try:
        have = (docker_api.inspect_image(PROXY_IMAGE)["Config"].get("Labels") or {}).get(
            "deltarun.dockerfile"
        )
    except docker.errors.ImageNotFound:
        have = None
    if have != want:
        built = subprocess.run(
            ["bash", "scripts/build-images.sh"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stdout + built.stderr
    return PROXY_IMAGE


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Any]:
    """A real Redis on a free loopback port for one test; a failure in CI when missing."""
    from tests.distributed_support import RedisServer

    if shutil.which("redis-server") is None:
        message = "redis-server is not installed; run `make redis`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
