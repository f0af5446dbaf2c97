"""The route lock across machines: a scored run on Celery workers stops at the first mismatch.

Real Redis, real worker processes, the scripted endpoint on 127.0.0.1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.config.loader import load_controls
from tests.distributed_support import Proc, RedisServer, start_worker, wait_for
from tests.fake_openai import FakeModel, call, reply
from tests.helpers import pin_validation, repo_task
from tests.test_openai_agent import suite_for

pytestmark = pytest.mark.docker


def test_scored_distributed_run_stops_and_workers_skip_the_rest(
    tmp_path: Path, redis_server: RedisServer, docker_api: object
) -> None:
    answered: list[int] = []

    def other_model(body: dict[str, object], index: int) -> object:
        answered.append(index)
        return reply(call("submit", {}), model="other-model")

    procs: list[Proc] = []
    with FakeModel(other_model) as fake:  # type: ignore[arg-type]
        controls = suite_for(
            tmp_path, fake.base_url, tasks=[repo_task(f"t{i}") for i in range(6)], channel="scored"
        )
        pin_validation(controls)
        image = load_controls(controls).controls.runtime.image
        digest = docker_api.inspect_image(image)["Id"]  # type: ignore[attr-defined]
        controls.write_text(controls.read_text() + f"images:\n  {image}: {digest}\n")
        try:
            worker = start_worker(redis_server, tmp_path / "worker.log", "-c", "1")
            procs.append(worker)
            coordinator = Proc(
                [
                    "run",
                    str(controls),
                    "--out",
                    str(tmp_path / "run"),
                    "--broker",
                    redis_server.url,
                ],
                tmp_path / "coordinator.log",
            )
            procs.append(coordinator)
            assert coordinator.wait(240) == 3, coordinator.text()
            assert "route_mismatch" in coordinator.text() and "Traceback" not in coordinator.text()
            # The worker drains the queue without running another trial of the run.
            wait_for(lambda: "run stopped" in worker.text(), 120, "a skipped job")
        finally:
            for proc in procs:
                proc.stop()
    lines = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    assert [t["arm"] for t in lines if t["route_mismatch"]] == ["model"]
    assert len(answered) == 1  # the endpoint was asked once: nothing ran after the mismatch
