"""Hostile agents as `command` arms, run through the real `execute_trial` on Docker; and
small sandboxes opened straight on the engine, for attacks on what a sandbox is made of."""

from __future__ import annotations

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.errors import UserError
from runner.records import Trial
from runner.sandbox.base import Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from tests.conftest import leftover_sandboxes, run_cli
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


def small_spec(
    image: str,
    name: str,
    *,
    memory: int = 256 << 20,
    workspace: int = 1 << 20,
    with_io: bool = False,
) -> SandboxSpec:
    """A sandbox of ``image`` with small limits, its own run label ``<name>-<hex>``."""
    return SandboxSpec(
        image=image,
        limits=Limits(memory_bytes=memory, nano_cpus=10**9, pids=64, workspace_bytes=workspace),
        lifetime_s=60,
        labels={"run": f"{name}-{uuid.uuid4().hex[:8]}", "job": "open"},
        with_io=with_io,
    )


def refused_to_open(docker_api: Any, spec: SandboxSpec, match: str) -> None:
    """Opening a sandbox of ``spec`` is refused in one line matching ``match``, and leaves
    nothing on the engine."""
    with pytest.raises(UserError, match=match), DockerSandboxFactory(docker_api).open(spec):
        pass
    assert leftover_sandboxes(docker_api, run=spec.labels["run"]) == ([], [])


def one_line(stderr: str) -> str:
    """The one line a refusal prints (a traceback or a second line fails the test)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def refused_run(controls: Path, out: Path) -> tuple[int, str, list[str]]:
    """``deltarun run`` of ``controls`` into ``out``: its exit, its one line, and the trial
    records it wrote (none, for a run refused before any trial)."""
    ran = run_cli("run", str(controls), "--out", str(out))
    records = out / "trials.jsonl"
    trials = records.read_text().splitlines() if records.exists() else []
    return ran.returncode, one_line(ran.stderr), trials


class Listener:
    """A loopback HTTP server standing for a service a suite must not reach (the only kind
    of address a test may aim at): it records each request's method, path and
    ``Authorization`` header and answers a secret."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []
        self.secret = "host-secret-" + uuid.uuid4().hex
        seen, secret = self.requests, self.secret.encode()

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                self.send_response(200)
                self.send_header("Content-Length", str(len(secret)))
                self.end_headers()
                self.wfile.write(secret)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/secret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def paths(self) -> list[str]:
        return [path for _, path, _ in self.requests]
