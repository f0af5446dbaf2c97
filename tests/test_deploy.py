"""The shipped service files agree with the CLI: the systemd unit and compose.yaml start
`deltarun worker` with options it accepts, drain before they kill, and name their
secrets by the environment variables deltarun reads."""

from __future__ import annotations

import configparser
import shlex
import subprocess
from pathlib import Path

import typer
import yaml

from runner.cli import app
from runner.distributed import credentials
from tests.distributed_support import ROOT

UNIT = ROOT / "deploy" / "deltarun-worker@.service"


def _worker_accepts(args: list[str]) -> None:
    """Parse ``args`` as `deltarun worker` would (click raises on an unknown option)."""
    command = typer.main.get_command(app)
    worker = command.commands["worker"]  # type: ignore[attr-defined]
    worker.make_context("worker", list(args))


def test_the_systemd_unit_drains_before_it_kills() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/deltarun") and argv[1] == "worker"
    _worker_accepts(argv[2:])
    drain = float(argv[argv.index("--drain-timeout") + 1])
    assert service["KillMode"] == "mixed"  # SIGTERM to the main process, not the pool
    assert service["KillSignal"] == "SIGTERM"
    assert float(service["TimeoutStopSec"]) > drain
    assert service["EnvironmentFile"] == "/etc/deltarun/worker.env"
    assert "--broker" not in " ".join(argv)  # the URL comes from the environment file


def test_compose_workers_take_their_secrets_from_files() -> None:
    spec = yaml.safe_load((ROOT / "compose.yaml").read_text())
    command = spec["services"]["worker"]["command"]
    assert command[0] == "worker"
    _worker_accepts(command[1:])
    assert "--broker" not in command and "--broker-file" in command
    grace = spec["services"]["worker"]["stop_grace_period"]
    assert grace.endswith("m") and int(grace[:-1]) * 60 > 900
    redis = spec["services"]["redis"]["command"]
    assert redis[redis.index("--port") + 1] == "0"  # TLS only
    assert redis[redis.index("--tls-auth-clients") + 1] == "yes"


def test_make_certs_writes_the_variables_deltarun_reads(tmp_path: Path) -> None:
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(tmp_path / "s"), "coord.example"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    read = {credentials.ENV_URL, credentials.ENV_JOB_KEY_FILE, *credentials.ENV_TLS.values()}
    for env_file in (tmp_path / "s" / "deltarun.env", tmp_path / "s" / "worker" / "worker.env"):
        names = {line.split("=", 1)[0] for line in env_file.read_text().splitlines() if line}
        assert names == read, env_file
        assert env_file.stat().st_mode & 0o077 == 0
    assert "@coord.example:6379/" in (tmp_path / "s" / "worker" / "worker.env").read_text()
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
    again = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 1 and "exists" in again.stderr  # never overwrites secrets
