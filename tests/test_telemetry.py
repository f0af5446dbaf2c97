"""Worker metrics for Prometheus (``runner.telemetry``): values recorded in
forked processes are summed by the collector; off, every recording function is a no-op;
a real worker's ``--metrics-port`` agrees with its run's ledger."""

from __future__ import annotations

import multiprocessing
import signal
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runner import telemetry
from tests.conftest import run_cli
from tests.distributed_support import (
    ROOT,
    free_port,
    ledger_lines,
    slow_suite,
    start_coordinator,
    start_worker,
    wait_for,
)

P = telemetry.PREFIX
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of the exposition text, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((P + name, frozenset(labels.items())), 0.0)


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {
        dict(labels)[label]: found
        for (sample, labels), found in samples.items()
        if sample == P + name and found
    }


def record_everything(outcome: str) -> None:
    telemetry.trial_started()
    telemetry.trial_finished(outcome)
    telemetry.trial_finished("error")
    telemetry.infrastructure_error(telemetry.UNKNOWN_PROTOCOL)
    telemetry.sandbox_started(0.3)
    telemetry.sandbox_started(4.0)
    with telemetry.phase("agent"):
        pass
    with telemetry.phase("verify"):
        pass
    telemetry.lease_renewed(True)
    telemetry.lease_renewed(False)
    telemetry.cache_lookup("staged", hit=True)
    telemetry.cache_lookup("members", hit=False)


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "metrics"
    directory.mkdir()
    telemetry.enable(directory)
    try:
        yield directory
    finally:
        telemetry.disable()


def test_values_of_forked_processes_are_summed(metrics_dir: Path) -> None:
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=record_everything, args=(o,)) for o in ("success", "miss")]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    samples = parse(telemetry.exposition(metrics_dir))
    assert value(samples, "trials_started_total") == 2
    assert by_label(samples, "trials_finished_total", "outcome") == {
        "success": 1,
        "miss": 1,
        "error": 2,
    }
    assert by_label(samples, "infrastructure_errors_total", "kind") == {
        telemetry.OUTCOME_ERROR: 2,
        telemetry.UNKNOWN_PROTOCOL: 2,
    }
    assert value(samples, "sandbox_start_seconds_count") == 4
    assert value(samples, "sandbox_start_seconds_sum") == pytest.approx(8.6)
    assert value(samples, "sandbox_start_seconds_bucket", le="0.5") == 2
    assert value(samples, "agent_phase_seconds_count") == 2
    assert value(samples, "verify_phase_seconds_count") == 2
    assert value(samples, "leases_renewed_total") == 2
    assert value(samples, "leases_lost_total") == 2
    assert by_label(samples, "cache_hits_total", "cache") == {"staged": 2}
    assert by_label(samples, "cache_misses_total", "cache") == {"members": 2}


def test_off_every_recording_is_a_no_op(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    telemetry.enable(directory)
    telemetry.disable()
    record_everything("success")  # nothing raises, nothing is written
    samples = parse(telemetry.exposition(directory))
    assert samples and not [key for key, found in samples.items() if found], samples
    # The local executor's path never even imports prometheus_client.
    code = (
        "import sys\n"
        "import runner.trial.execute, runner.trees.staging, runner.sandbox.docker, runner.distributed.worker\n"
        "from runner import telemetry as t\n"
        "t.trial_started(); t.trial_finished('error'); t.infrastructure_error('infra')\n"
        "t.sandbox_started(1.0); t.lease_renewed(False); t.cache_lookup('blobs', hit=True)\n"
        "with t.phase('agent'):\n    pass\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path, redis_server: Any) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        tmp = tmp_path / "tmp"
        tmp.mkdir()
        result = run_cli(
            "worker",
            "--broker",
            redis_server.url,
            "--metrics-port",
            str(port),
            env={"TMPDIR": str(tmp)},
            timeout=60,
        )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"deltarun: error: --metrics-port {port}: cannot listen on")
    assert not list(tmp.glob("deltarun-metrics-*")), "the metrics directory is removed"


@pytest.mark.docker
def test_worker_metrics_agree_with_the_ledger(
    tmp_path: Path, redis_server: Any, docker_api: Any
) -> None:
    """One task, a control and a candidate arm (2 jobs) through one worker with -c 2."""
    controls = slow_suite(tmp_path, tasks=1, sleep_s=2)
    port = free_port()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    worker = start_worker(
        redis_server,
        tmp_path / "w1.log",
        "-c",
        "2",
        "--metrics-port",
        str(port),
        name="w1",
        env={"TMPDIR": str(tmp)},
    )
    coordinator = start_coordinator(redis_server, controls, tmp_path / "run")
    try:
        assert f"metrics: http://127.0.0.1:{port}/metrics" in worker.text()
        assert coordinator.wait(120) == 0, coordinator.text()[-3000:]
        records = ledger_lines(tmp_path / "run")
        outcomes = Counter(r["outcome"] for r in records)
        assert len(records) == 2 and sum(outcomes.values()) == 2, outcomes

        def scrape() -> Samples | None:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as answer:
                samples = parse(answer.read().decode())
            finished = by_label(samples, "trials_finished_total", "outcome")
            return samples if finished == dict(outcomes) else None

        samples = wait_for(scrape, 15, "the metrics to count every record")
        assert value(samples, "trials_started_total") == len(records)
        # Each trial opens sandbox A and sandbox B (and the preflight opens one more).
        assert value(samples, "sandbox_start_seconds_count") >= 2 * len(records)
        assert value(samples, "agent_phase_seconds_count") == len(records)
        assert value(samples, "verify_phase_seconds_count") == len(records)
        # The candidate's trial outlasts a renewal period (FAST_ENV: every 1.3 s).
        assert value(samples, "leases_renewed_total") >= 1
        assert value(samples, "leases_lost_total") == 0
        assert value(samples, "infrastructure_errors_total", kind="outcome_error") == 0
        staged = by_label(samples, "cache_hits_total", "cache").get("staged", 0) + by_label(
            samples, "cache_misses_total", "cache"
        ).get("staged", 0)
        assert staged >= len(records)
        worker.kill(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.text()[-3000:]
        assert not list(tmp.glob("deltarun-metrics-*")), "the metrics directory is removed at exit"
    finally:
        coordinator.stop()
        worker.stop()
