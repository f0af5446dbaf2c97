"""Hostile agents as `command` arms, run through the real `execute_trial` on Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.records import Trial
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

PROBE_TASK = {
    "id": "probe",
    "kind": "ordinary",
    "prompt": "Report what you can see.",
    "expect": {},
    "schema": {},
    "metrics": ["json_schema_ok"],
    "deadline_s": 60,
}


def hostile(
    tmp_path: Path,
    docker_api: Any,
    script: str,
    *,
    repo: bool = False,
    timeout_s: float = 30,
    runtime: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    fixture: dict[str, str | bytes] | None = None,
    name: str = "hostile",
) -> Trial:
    """One trial of an agent running ``script`` (sh) in /workspace as the agent user.

    With ``repo=False`` the task is an answer task: the agent reports what it saw as
    JSON in ``$DELTARUN_ANSWER_FILE`` and the record's ``answer`` carries it.
    """
    agent = write_agent(tmp_path, name, script)
    task: dict[str, Any] = (
        repo_task("t1", timeout_s=timeout_s) if repo else {**PROBE_TASK, "deadline_s": timeout_s}
    )
    controls = make_suite(
        tmp_path,
        [task],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": name, "agent": agent},
        ],
        runtime=runtime,
        tools=tools,
        fixtures={"t1": fixture} if fixture else None,
    )
    return run_one(docker_api, controls, task["id"], name)


REPORT_PY = r"""
import json, os, sys
def report(data):
    with open(os.environ["DELTARUN_ANSWER_FILE"], "w") as handle:
        json.dump(data, handle)
"""


def write_files(*pairs: tuple[str, str]) -> str:
    """An agent script (sh) that writes each (path, content) into the workspace."""
    lines = []
    for path, content in pairs:
        if "/" in path:
            lines.append(f"mkdir -p '{path.rsplit('/', 1)[0]}'")
        lines.append(f"cat > '{path}' <<'DELTARUN_EOF'\n{content}DELTARUN_EOF")
    return "\n".join(lines) + "\n"
