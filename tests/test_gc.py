"""`deltarun gc`: lists and removes labelled sandboxes past their deadline, keeps live ones."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers import PY_IMAGE

pytestmark = pytest.mark.docker


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
