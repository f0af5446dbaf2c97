"""`deltarun gc`: lists and removes labelled sandboxes past their deadline, keeps live ones."""

from __future__ import annotations

import time
import uuid
from typing import Any

import docker.errors
import pytest

from runner.sandbox.docker import REMOVE_ATTEMPTS, _remove_container
from tests import conftest
from tests.conftest import leftover_sandboxes, run_cli
from tests.helpers import PY_IMAGE

pytestmark = pytest.mark.docker


# Alone: any `gc` would remove its expired sandbox.
@pytest.mark.exclusive
def test_gc_removes_only_expired(docker_api: Any) -> None:
    def make(deadline: float) -> str:
        return str(
            docker_api.create_container(
                PY_IMAGE,
                command=["true"],
                labels={"deltarun.deadline": str(int(deadline)), "deltarun.job": "gc-test"},
            )["Id"]
        )

    expired, live = make(time.time() - 10), make(time.time() + 3600)
    try:
        dry = run_cli("gc", "--dry-run")
        assert dry.returncode == 0 and f"would remove container {expired[:12]}" in dry.stdout
        assert live[:12] not in dry.stdout
        assert docker_api.inspect_container(expired)
        done = run_cli("gc")
        assert done.returncode == 0 and f"removed container {expired[:12]}" in done.stdout
        ids = [c["Id"] for c in docker_api.containers(all=True)]
        assert expired not in ids and live in ids
    finally:
        for container in (expired, live):
            try:
                docker_api.remove_container(container, force=True)
            except Exception:
                pass


# Alone: any `gc` would remove its expired sandboxes.
@pytest.mark.exclusive
def test_leak_checks_ignore_what_an_earlier_session_left(docker_api: Any) -> None:
    """A sandbox left by a killed earlier run is `gc`'s to remove, not a leak of this test."""
    run = f"stale-{uuid.uuid4().hex[:8]}"
    labels = {"deltarun.deadline": str(int(time.time() - 10)), "deltarun.run": run}
    made = []
    try:
        made.append(docker_api.create_container(PY_IMAGE, command=["true"], labels=labels)["Id"])
        time.sleep(1.1)
        conftest._TEST_STARTED[0] = time.time()  # this test "begins" after the stale one
        assert leftover_sandboxes(docker_api, run=run) == ([], [])
        made.append(docker_api.create_container(PY_IMAGE, command=["true"], labels=labels)["Id"])
        assert leftover_sandboxes(docker_api, run=run) == ([made[1][:12]], [])
    finally:
        for container in made:
            docker_api.remove_container(container, force=True)


class _BusyEngine:
    """A Docker client whose forced removal fails while the engine is still killing."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def remove_container(self, container: str, force: bool, v: bool) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise docker.errors.APIError("removal of container is already in progress")


def test_removal_retries_a_busy_engine() -> None:
    busy = _BusyEngine(failures=2)
    _remove_container(busy, "c1")  # type: ignore[arg-type]
    assert busy.calls == 3
    stuck = _BusyEngine(failures=100)
    _remove_container(stuck, "c1")  # type: ignore[arg-type]
    assert stuck.calls == REMOVE_ATTEMPTS
