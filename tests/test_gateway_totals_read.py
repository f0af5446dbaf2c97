"""The relay reads a gateway's totals through the engine only when they changed.

A copy out of a container (``get_archive``) starts one of the engine's tar processes, about
50 ms of CPU; a paced relay asks every 50 ms, so reading the totals each time cost about a
core per gateway. The relay now stats the file first (``path_stat``) and copies it out only
when its stat changed, or once ``REREAD_S`` has passed; the proxy gives each version of the
file a later modification time than the last, so no change can hide behind an equal stat.
"""

from __future__ import annotations

import io
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.gateway import ledger as ledger_module
from runner.gateway.ledger import Ledger
from runner.sandbox import gateway_relay
from runner.sandbox.engine import path_stat
from runner.sandbox.gateway_ledger import LEDGER_DIR
from runner.sandbox.gateway_relay import DockerGateway
from tests.helpers import PY_IMAGE


def test_each_version_of_the_totals_has_a_later_modification_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes of equal size with the clock standing still (as within one tick of a file
    system's coarse clock, on kernels without fine-grained file times): each version still
    has a modification time of its own, later than the one before."""
    ledger = Ledger(str(tmp_path), stream=io.StringIO())
    times = [(tmp_path / "totals.json").stat().st_mtime_ns]
    monkeypatch.setattr(ledger_module.time, "time_ns", lambda: times[0])
    for n in range(50):
        ledger.note_rate({"granted": n % 10})
        times.append((tmp_path / "totals.json").stat().st_mtime_ns)
    assert all(later > earlier for earlier, later in itertools.pairwise(times)), times


class CountingClient(docker.APIClient):
    """The engine client, counting the copies out of a container."""

    copies = 0

    def get_archive(self, *args: Any, **kwargs: Any) -> Any:
        self.copies += 1
        return super().get_archive(*args, **kwargs)


@pytest.fixture
def gateway(docker_api: Any, tmp_path: Path) -> Iterator[tuple[Ledger, DockerGateway]]:
    """A real ``Ledger`` writing into a directory a running container sees as its ledger
    directory, and the relay's view of that container."""
    ledger_dir = tmp_path / "ledger"
    ledger_dir.mkdir()
    ledger = Ledger(str(ledger_dir), stream=io.StringIO())
    client = CountingClient(version="auto", **docker.utils.kwargs_from_env())
    container = client.create_container(
        PY_IMAGE,
        command=["sleep", "120"],
        labels={"deltarun.test": f"totals-{uuid.uuid4().hex[:8]}"},
        host_config=client.create_host_config(
            binds={str(ledger_dir): {"bind": LEDGER_DIR, "mode": "ro"}}, network_mode="none"
        ),
    )["Id"]
    try:
        client.start(container)
        yield ledger, DockerGateway(client, container)
    finally:
        client.remove_container(container, force=True)
        client.close()


@pytest.mark.docker
def test_the_totals_are_copied_out_only_when_they_changed(
    gateway: tuple[Ledger, DockerGateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, port = gateway
    client = port.client
    assert isinstance(client, CountingClient)
    first = port.totals()
    assert first is not None and first["forwarded"] == 0 and client.copies == 1
    for _ in range(20):  # unchanged: the same totals, from the stat alone
        assert port.totals() == first
    assert client.copies == 1
    for n in range(1, 6):  # each change is read, at once, however close to the last
        ledger.note_rate({"granted": n})
        seen = port.totals()
        assert seen is not None and seen["rate"] == {"granted": n}
    assert client.copies == 6
    # An unchanged stat is trusted for REREAD_S only; then the file is read anyway.
    monkeypatch.setattr(gateway_relay, "REREAD_S", 0.0)
    assert port.totals() == seen and client.copies == 7


@pytest.mark.docker
def test_a_stat_names_size_and_time_and_nothing_for_a_missing_file(
    gateway: tuple[Ledger, DockerGateway],
) -> None:
    ledger, port = gateway
    path = f"{LEDGER_DIR}/totals.json"
    before = path_stat(port.client, port.container, path)
    assert before is not None and before[0] == os.path.getsize(
        Path(ledger.directory or "", "totals.json")
    )
    ledger.note_rate({"granted": 1})
    after = path_stat(port.client, port.container, path)
    assert after is not None and after != before
    assert path_stat(port.client, port.container, f"{LEDGER_DIR}/absent.json") is None
    assert path_stat(port.client, "no-such-container", path) is None
