"""A run full of hostile arms through the real command: the ledger and the report stay whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker

HOSTILE = {
    "sleeper": "sleep infinity\n",
    "bomb": "bomb() { bomb | bomb & }\nbomb\nsleep 30\n",
    "filler": "dd if=/dev/zero of=/workspace/x bs=1M count=2000 2>/dev/null; "
    "head -c 50000000 /dev/zero\n",
    "escaper": "echo '{}' > /tmp/trials.jsonl; ls / > /dev/null; setsid sleep 999 &\n",
}


def test_hostile_arms_leave_the_ledger_whole(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
    ]
    for name, script in HOSTILE.items():
        arms.append({"name": name, "agent": write_agent(tmp_path, name, script)})
    (tmp_path / "gold").mkdir()
    for i in range(2):
        (tmp_path / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    controls = make_suite(
        tmp_path,
        [repo_task(f"t{i}", timeout_s=5) for i in range(2)],
        arms,
        runtime={"limits": {"workspace": "64m"}},
    )
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), "-j", "2")
    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    outcomes = {(r["arm"], r["task_id"]): r["outcome"] for r in records}
    held(
        "hostile run, end to end",
        "sleeper, fork bomb, disk filler, escaper beside gold at -j 2",
        f"exit {result.returncode}; {len(records)} records for 12 jobs; gold: "
        f"{sorted({v for (a, _), v in outcomes.items() if a == 'gold'})}",
    )
    assert result.returncode == 0, result.stderr
    assert len(records) == 12 and len({r["job_id"] for r in records}) == 12
    assert all(outcomes[("gold", f"t{i}")] == "success" for i in range(2))
    assert all(outcomes[("sleeper", f"t{i}")] == "timeout" for i in range(2))
    assert not [r for r in records if r["error"]]
    assert (out / "report.json").is_file() and run_cli("replay", str(out)).returncode == 0
