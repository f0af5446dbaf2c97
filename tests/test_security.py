"""The queue's security: where the broker URL and the job key come from, TLS and the ACL
password against a real redis-server, and signed jobs and records with real Celery
workers (someone who can write to Redis without the key runs nothing and records nothing)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.distributed import keys
from runner.distributed.credentials import (
    BrokerOptions,
    default_key_path,
    load_job_key,
    redact,
    resolve_broker,
    scrub,
)
from runner.distributed.signing import (
    fingerprint,
    job_refusal,
    record_signed,
    sign_job,
    sign_record,
)
from runner.errors import DeltarunError, UsageError, UserError
from tests.distributed_support import (
    DELTARUN,
    Proc,
    RedisServer,
    ledger_lines,
    make_secrets,
    session_key,
    slow_suite,
    start_worker,
    wait_for,
)

SECRET = "s3cr3t-Pa55word"


# -- where the broker comes from -------------------------------------------------------------


def test_broker_comes_from_the_option_else_the_file_else_the_environment(tmp_path: Path) -> None:
    env = {"DELTARUN_BROKER_URL": "redis://env-host:6379/0"}
    assert resolve_broker(BrokerOptions(), {}) is None
    assert resolve_broker(BrokerOptions(), env).url == "redis://env-host:6379/0"  # type: ignore[union-attr]
    url_file = tmp_path / "broker.url"
    url_file.write_text("# the fleet's broker\n\nredis://file-host:6379/1\n")
    url_file.chmod(0o600)
    found = resolve_broker(BrokerOptions(file=url_file), env)
    assert found is not None and found.url == "redis://file-host:6379/1" and not found.warnings
    found = resolve_broker(BrokerOptions(url="redis://cli-host:6379/2"), env)
    assert found is not None and found.url == "redis://cli-host:6379/2"
    with pytest.raises(UsageError, match="not both"):
        resolve_broker(BrokerOptions(url="redis://a/0", file=url_file), {})
    empty = tmp_path / "empty.url"
    empty.write_text("# nothing\n")
    for bad, needle in ((empty, "no URL in it"), (tmp_path / "absent.url", "cannot read")):
        with pytest.raises(UserError, match=needle) as caught:
            resolve_broker(BrokerOptions(file=bad), {})
        assert str(bad) in str(caught.value) and "\n" not in str(caught.value)


def test_a_password_where_others_can_read_it_is_warned(tmp_path: Path) -> None:
    found = resolve_broker(BrokerOptions(url=f"redis://u:{SECRET}@h:6379/0"), {})
    assert (
        found is not None
        and "visible" in found.warnings[0]
        and "--broker-file" in found.warnings[0]
    )
    shared = tmp_path / "broker.url"
    shared.write_text(f"redis://u:{SECRET}@h:6379/0\n")
    shared.chmod(0o644)
    found = resolve_broker(BrokerOptions(file=shared), {})
    assert found is not None and f"chmod 600 {shared}" in found.warnings[0]
    assert all(SECRET not in w for w in found.warnings) and SECRET not in found.shown


def test_tls_files_join_the_url_and_the_certificate_check_stays_on(tmp_path: Path) -> None:
    pem = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for path in pem.values():
        path.write_text("-----BEGIN-----\n")
    found = resolve_broker(
        BrokerOptions(url="rediss://h:6380/0", ca=pem["ca"], cert=pem["cert"], key=pem["key"]), {}
    )
    assert found is not None
    assert "ssl_cert_reqs=required" in found.url and "ssl_ca_certs=" in found.url
    assert "ssl_certfile=" in found.url and "ssl_keyfile=" in found.url
    # The same from the environment, as compose and systemd units give them.
    env = {"DELTARUN_BROKER_URL": "rediss://h:6380/0", "DELTARUN_BROKER_CA": str(pem["ca"])}
    assert "ssl_ca_certs=" in resolve_broker(BrokerOptions(), env).url  # type: ignore[union-attr]
    refused: list[tuple[BrokerOptions, type[DeltarunError], str]] = [
        (BrokerOptions(url="redis://h:6379/0", ca=pem["ca"]), UsageError, "rediss://"),
        (BrokerOptions(url="rediss://h/0?ssl_cert_reqs=none"), UserError, "turns off"),
        (BrokerOptions(url="rediss://h/0?ssl_check_hostname=false"), UserError, "turns off"),
        (BrokerOptions(url="rediss://h/0", cert=pem["cert"]), UsageError, "needs its key"),
        (BrokerOptions(url="rediss://h/0", ca=tmp_path / "nope.pem"), UserError, "--broker-ca"),
        (BrokerOptions(url="http://h/"), UserError, "not a Redis URL"),
        (BrokerOptions(ca=pem["ca"]), UsageError, "need a broker URL"),
    ]
    for options, kind, needle in refused:
        with pytest.raises(kind, match=needle):
            resolve_broker(options, {})


def test_the_password_is_masked_in_every_form() -> None:
    url = f"rediss://deltarun:{SECRET}@redis.example:6380/0?ssl_ca_certs=%2Fca.pem"
    assert redact(url) == "rediss://deltarun:***@redis.example:6380/0 (TLS)"
    assert redact("redis://h:6379/0") == "redis://h:6379/0"
    assert redact(f"redis://:{SECRET}@h:6379/0") == "redis://:***@h:6379/0"
    assert SECRET not in scrub(f"error at {url}: auth {SECRET} refused", url)


# -- the job key -----------------------------------------------------------------------------


def _load(config: str) -> str:
    return load_job_key(None, {"XDG_CONFIG_HOME": config}).key.decode()


def test_the_default_job_key_is_made_once_private_and_shared(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    # Four processes starting together (a coordinator and workers) agree on one key.
    with multiprocessing.get_context("fork").Pool(4) as pool:
        keys_seen = set(pool.map(_load, [env["XDG_CONFIG_HOME"]] * 8))
    assert len(keys_seen) == 1
    path = default_key_path(env)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_job_key(None, env).key.decode() == keys_seen.pop()
    assert not load_job_key(None, env).created
    assert [p.name for p in path.parent.iterdir()] == ["job.key"]  # no temporary left


def test_job_key_sources_and_errors(tmp_path: Path) -> None:
    named = tmp_path / "named.key"
    named.write_text("k" * 40 + "\n")
    assert load_job_key(named, {"DELTARUN_JOB_KEY": "e" * 40}).key == b"k" * 40
    assert load_job_key(None, {"DELTARUN_JOB_KEY": "e" * 40}).key == b"e" * 40
    assert load_job_key(None, {"DELTARUN_JOB_KEY_FILE": str(named)}).key == b"k" * 40
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    for option, env, needle in (
        (tmp_path / "missing.key", {}, "no such file"),
        (short, {}, "at least 32"),
        (None, {"DELTARUN_JOB_KEY": "short"}, "at least 32"),
        (None, {"DELTARUN_JOB_KEY_FILE": str(tmp_path / "gone")}, "copy the coordinator's"),
    ):
        with pytest.raises(UserError, match=needle) as caught:
            load_job_key(option, env)
        assert "\n" not in str(caught.value)


def test_a_signature_covers_every_field_and_only_its_kind() -> None:
    key, other = b"k" * 32, b"o" * 32
    job = {"job_id": "j" * 64, "run_id": "r", "protocol_sha256": "p" * 64, "task_id": "t"}
    job |= {"arm": "cand", "repeat": 0}
    payload = {"job": job, "image": "img:1", "image_id": "sha256:" + "1" * 64}
    payload["sig"] = sign_job(key, payload)
    assert job_refusal(key, payload) is None
    assert job_refusal(other, payload) == "signature does not match this worker's job key"
    assert job_refusal(key, {"job": job}) == "unsigned job"
    assert job_refusal(key, {"job": job, "sig": ""}) == "unsigned job"
    assert job_refusal(key, "not a dict") == "not a deltarun job message"
    for field, value in job.items():  # any change to any field breaks the signature
        changed = {**job, field: value + 1 if isinstance(value, int) else value + "x"}
        assert job_refusal(key, {**payload, "job": changed}) is not None, field
    for field in ("image", "image_id"):  # and so does another image, or dropping the pin
        assert job_refusal(key, {**payload, field: "sha256:" + "2" * 64}) is not None
        assert job_refusal(key, {k: v for k, v in payload.items() if k != field}) is not None
    raw = json.dumps(job)
    assert record_signed(key, raw, sign_record(key, raw))
    assert not record_signed(key, raw, None) and not record_signed(
        other, raw, sign_record(key, raw)
    )
    assert not record_signed(key, raw.replace("cand", "ctrl"), sign_record(key, raw))
    # A record's signature is no job's signature, even over the same text.
    assert sign_record(key, json.dumps({"job": job}, sort_keys=True, separators=(",", ":"))) != (
        sign_job(key, {"job": job})
    )
    assert fingerprint(key) != fingerprint(other) and len(fingerprint(key)) == 12


# -- records in Redis: only the run's workers' count -----------------------------------------


def test_the_coordinator_keeps_only_records_signed_with_its_key(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    from runner.distributed.celery_app import make_app
    from runner.distributed.coordinator import _Coordinator
    from runner.records import Outcome, TaskKind, Trial
    from runner.run.prepare import prepare
    from runner.trial.record import bare_record
    from tests.helpers import make_suite

    task = {"id": "q", "kind": "ordinary", "prompt": "p", "expect": 1}
    task |= {"metrics": ["exact_match"], "deadline_s": 5}
    controls = make_suite(
        tmp_path,
        [task],
        [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
        runtime={"repeats": 3},
    )
    prepared = prepare(controls, tmp_path / "run", resume=False, image_digest=lambda i: "sha256:x")
    key = session_key()
    client = redis_server.client()
    stream = keys.records(prepared.meta.run_id)

    def forged(job_index: int, outcome: Outcome) -> str:
        job = prepared.jobs[job_index]
        now = datetime.now(UTC)
        trial: Trial = bare_record(job, TaskKind.ORDINARY, outcome, "intruder", now, now)
        return trial.model_dump_json()

    fake_pass = forged(0, Outcome.SUCCESS)
    client.xadd(stream, {"trial": fake_pass})  # unsigned
    client.xadd(stream, {"trial": fake_pass, "sig": sign_record(b"x" * 40, fake_pass)})
    garbage = '{"job_id": "' + prepared.jobs[1].job_id + '"'  # unreadable, names a job
    client.xadd(stream, {"trial": garbage})
    # A genuine, signed record of an earlier run of the same protocol (same job ids).
    replayed = forged(1, Outcome.SUCCESS).replace(prepared.meta.run_id, "an-earlier-run")
    client.xadd(stream, {"trial": replayed, "sig": sign_record(key, replayed)})
    genuine = forged(2, Outcome.MISS)
    client.xadd(stream, {"trial": genuine, "sig": sign_record(key, genuine)})
    kept: list[Trial] = []
    warnings: list[str] = []
    coordinator = _Coordinator(
        prepared,
        client,
        make_app(redis_server.url),
        lambda fresh, dups: kept.extend(fresh + dups),
        warnings.append,
        keys.TRIAL_TASK,
        key,
    )
    assert coordinator.collect(block_ms=None) == 5
    assert [t.job_id for t in kept] == [prepared.jobs[2].job_id]
    assert kept[0].outcome is Outcome.MISS
    assert set(coordinator.pending) == {prepared.jobs[0].job_id, prepared.jobs[1].job_id}
    assert len(warnings) == 2 and "not signed with this run's job key" in warnings[0]
    assert "belongs to run an-earlier-run" in warnings[1]


# -- TLS, a password and signed jobs, end to end ---------------------------------------------


@pytest.fixture
def tls_redis(tmp_path: Path) -> Any:
    import shutil

    from tests.conftest import IN_CI

    for tool in ("redis-server", "openssl"):
        if shutil.which(tool) is None:
            message = f"{tool} is not installed; run `make redis`"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
    server = RedisServer(tmp_path / "redis-tls", tls=make_secrets(tmp_path / "secrets"))
    server.start()
    yield server
    server.stop()


def _url_file(path: Path, url: str) -> Path:
    path.write_text(url + "\n")
    path.chmod(0o600)
    return path


def test_wrong_password_ca_or_scheme_is_one_line_and_writes_nothing(
    tmp_path: Path, tls_redis: RedisServer
) -> None:
    secrets_dir = tls_redis.tls
    assert secrets_dir is not None
    controls = slow_suite(tmp_path, tasks=1)
    good = tls_redis.url
    password = good.split(":")[2].split("@")[0]
    other_ca = make_secrets(tmp_path / "other-secrets") / "ca.crt"
    client_cert = ["--broker-cert", str(secrets_dir / "client.crt")]
    client_cert += ["--broker-key", str(secrets_dir / "client.key")]
    cases = [
        (good.replace(password, "wrong-password"), tls_redis.tls_args(), "password is wrong"),
        (good, ["--broker-ca", str(other_ca), *client_cert], "not trusted"),
        (good.replace("rediss://", "redis://"), [], "use rediss://"),
        (good, ["--broker-ca", str(secrets_dir / "ca.crt")], "client certificate"),
        (good.replace(f"deltarun:{password}@", ""), tls_redis.tls_args(), "needs a password"),
    ]
    for index, (url, args, needle) in enumerate(cases):
        url_file = _url_file(tmp_path / f"broker-{index}.url", url)
        out = tmp_path / f"run-{index}"
        for command in (
            ["run", str(controls), "--out", str(out), "--broker-file", str(url_file), *args],
            ["worker", "--broker-file", str(url_file), *args],
        ):
            result = subprocess.run(
                [DELTARUN, *command], capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 1, (command, result.stderr)
            assert needle in result.stderr, (needle, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
            assert "Traceback" not in result.stderr and password not in result.stderr
            assert not out.exists()


def test_a_tls_fleet_runs_only_jobs_signed_with_its_key(
    tmp_path: Path, tls_redis: RedisServer, docker_api: object
) -> None:
    from runner.distributed.celery_app import make_app
    from runner.distributed.credentials import BrokerOptions, resolve_broker

    secrets_dir = tls_redis.tls
    assert secrets_dir is not None
    url_file = _url_file(tmp_path / "broker.url", tls_redis.url)
    password = tls_redis.url.split(":")[2].split("@")[0]
    broker = ["--broker-file", str(url_file), *tls_redis.tls_args()]
    # A worker holding another key: it must refuse the run's jobs, and the coordinator say so.
    stranger_key = "stranger-" + os.urandom(20).hex()
    stranger = start_worker(
        tls_redis,
        tmp_path / "stranger.log",
        "-c",
        "1",
        name="stranger",
        broker=broker,
        env={"DELTARUN_JOB_KEY": stranger_key},
    )
    controls = slow_suite(tmp_path, tasks=2, sleep_s=0.2)
    out = tmp_path / "run"
    env = {  # the coordinator's broker from the environment, as a service manager gives it
        "DELTARUN_BROKER_URL": tls_redis.url,
        "DELTARUN_BROKER_CA": str(secrets_dir / "ca.crt"),
        "DELTARUN_BROKER_CERT": str(secrets_dir / "client.crt"),
        "DELTARUN_BROKER_KEY": str(secrets_dir / "client.key"),
        "DELTARUN_QUEUE_CHECK_S": "1",
    }
    coordinator = Proc(["run", str(controls), "--out", str(out)], tmp_path / "coord.log", env)
    member: Proc | None = None
    try:
        wait_for(lambda: "refused jobs of this run" in coordinator.text(), 60, "the warning")
        warning = next(x for x in coordinator.text().splitlines() if "refused jobs" in x)
        assert "stranger" in warning and fingerprint(stranger_key.encode()) in warning
        assert fingerprint(session_key()) in warning
        assert "refused job" in stranger.text() and ledger_lines(out) == []
        # A worker with the run's key takes the jobs the stranger refused, sent again.
        member = start_worker(tls_redis, tmp_path / "member.log", name="member", broker=broker)
        assert coordinator.wait(180) == 0, coordinator.text()
        records = ledger_lines(out)
        assert len(records) == 4 and {r["worker"] for r in records} == {"member"}
        assert (out / "report.json").exists()

        # Someone with Redis's password but without the key: an unsigned job and a signed
        # job changed to another arm are refused by the workers, never run or recorded.
        client = tls_redis.client()
        done_before = client.hlen(keys.done(records[0]["run_id"]))
        stream_before = client.xlen(keys.records(records[0]["run_id"]))
        run_id = records[0]["run_id"]
        job = {k: records[0][k] for k in ("job_id", "run_id", "protocol_sha256", "task_id")}
        job |= {"arm": records[0]["arm"], "repeat": 7, "job_id": "f" * 64}
        tampered = {**job, "job_id": "e" * 64, "arm": "ctrl" if job["arm"] != "ctrl" else "slow"}
        url = resolve_broker(BrokerOptions(file=url_file), env)
        assert url is not None
        app = make_app(url.url)
        queue = keys.queue_for_image("deltarun/sandbox-python:bookworm")
        app.send_task(keys.TRIAL_TASK, args=[{"job": job}], queue=queue)
        app.send_task(
            keys.TRIAL_TASK,
            args=[{"job": tampered, "sig": sign_job(session_key(), {"job": job})}],
            queue=queue,
        )
        logs = lambda: stranger.text() + member.text()  # noqa: E731
        wait_for(lambda: "f" * 12 in logs() and "e" * 12 in logs(), 60, "both refusals")
        assert "unsigned job" in logs() and "does not match" in logs()
        time.sleep(1)
        assert client.hlen(keys.done(run_id)) == done_before
        assert client.xlen(keys.records(run_id)) == stream_before
        assert not client.hexists(keys.started(run_id), "f" * 64)
        assert not client.hexists(keys.started(run_id), "e" * 64)
        notices = [json.loads(n) for n in client.lrange(keys.refused(run_id), 0, -1)]
        assert {"f" * 64, "e" * 64} <= {n["job_id"] for n in notices}
        # The password is in no log and on no command line (ps) of the fleet.
        for proc in (stranger, member, coordinator):
            assert password not in proc.text()
        for proc in (stranger, member):
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
            assert password not in cmdline and str(url_file) in cmdline
    finally:
        for proc in (stranger, member, coordinator):
            if proc is not None:
                proc.stop()


def test_a_sandbox_is_made_from_the_pinned_image_whatever_the_tag_names(
    docker_api: Any,
) -> None:
    """A moved tag (a rebuild, or an image a worker was told through Redis to pull under the
    run's tag) never decides what a trial runs in: the sandbox is made from the signed pin."""
    from runner.errors import SandboxError
    from runner.sandbox.base import Limits, SandboxSpec
    from runner.sandbox.docker import DockerSandboxFactory
    from runner.sandbox.engine import image_id
    from tests.helpers import PY_IMAGE

    pinned = image_id(docker_api, PY_IMAGE)
    impostor = image_id(docker_api, "deltarun/model-proxy:bookworm")
    moved = f"deltarun/pin-test:{os.urandom(4).hex()}"
    repository, tag = moved.split(":")
    docker_api.tag(impostor, repository, tag)
    limits = Limits(memory_bytes=256 << 20, nano_cpus=10**9, pids=64, workspace_bytes=16 << 20)
    labels = {"run": "pin-test", "job": "pin-test"}
    try:
        factory = DockerSandboxFactory(docker_api, worker="pin-test")
        spec = SandboxSpec(
            image=moved, image_id=pinned, limits=limits, lifetime_s=60, labels=labels
        )
        with factory.open(spec) as sandbox:
            assert sandbox.image_digest == pinned
            live = docker_api.containers(filters={"label": ["deltarun.run=pin-test"]})
            assert [c["ImageID"] for c in live] == [pinned]
        absent = "sha256:" + "0" * 64
        absent_spec = SandboxSpec(moved, limits, 60, labels, image_id=absent)
        with pytest.raises(SandboxError, match="which this engine does not have") as caught:
            factory.open(absent_spec).__enter__()
        assert "\n" not in str(caught.value) and impostor[:19] in str(caught.value)
        # Without a pin (a local run of a build tool, never a trial) the tag's image is used.
        with factory.open(SandboxSpec(image=moved, limits=limits, lifetime_s=60, labels=labels)):
            live = docker_api.containers(filters={"label": ["deltarun.run=pin-test"]})
            assert [c["ImageID"] for c in live] == [impostor]
    finally:
        docker_api.remove_image(moved)
