"""`deltarun export RUN_DIR --kit DIR`, the kit's replay.sh, and `replay --reverify --controls`.

The pure tests make their run directory with ``prepare`` (what `deltarun run` does before
the first sandbox; no Docker) and drive replay.sh with a stub in place of deltarun. One
Docker test runs the real thing: run, export, move the kit elsewhere with every original
gone, re-verify and rerun from the kit alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner import __version__
from runner.config.loader import load_controls
from runner.errors import ProtocolMismatch, UserError
from runner.hashing import sha256_bytes
from runner.run.prepare import prepare
from runner.run.reverify import reverify_inputs
from runner.run.scoring_code import scoring_sha256
from runner.store.rundir import RunDir
from tests.conftest import leftover_sandboxes, run_cli
from tests.helpers import ADD_GOLD, PY_IMAGE, make_suite, repo_task

ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]
REPORT_MD = "# deltarun report: test\n\n## Headline\n\n- gold vs ctrl: +100.0 pp\n\n## Pins\n"
EXE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"


def gold_suite(root: Path, n: int = 2) -> Path:
    (root / "gold").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    return make_suite(root, [repo_task(f"t{i}") for i in range(n)], ARMS)


def prepared_run(controls: Path, out: Path) -> Path:
    """A run directory as `deltarun run` leaves it before its first trial, plus a report."""
    prepare(controls, out, resume=False, image_digest=lambda image: "sha256:" + "0" * 64)
    (out / "report.md").write_text(REPORT_MD)
    return out


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, Path]:
    """(controls, run directory) of a two-task suite under tmp_path/orig."""
    root = tmp_path / "orig"
    root.mkdir()
    controls = gold_suite(root)
    return controls, prepared_run(controls, root / "run")


def protocol_of(run: Path) -> str:
    return str(json.loads((run / "run.json").read_text())["protocol_sha256"])


def one_line(stderr: str) -> bool:
    return stderr.count("\n") == 1 and "Traceback" not in stderr


def test_kit_holds_the_inputs_at_their_paths_and_hashes_to_the_protocol(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    controls, run = made
    kit = tmp_path / "kit"
    result = run_cli("export", str(run), "--kit", str(kit))
    assert result.returncode == 0, result.stderr
    assert "sh " + str(kit / "replay.sh") + " --verify-only" in result.stdout
    assert (kit / "controls.yaml").read_bytes() == (run / "controls.yaml").read_bytes()
    assert load_controls(kit / "controls.yaml").protocol_sha256 == protocol_of(run)
    for rel in [
        "suite/tasks.jsonl",
        "suite/fixtures/t0.tar",
        "suite/hidden/t1.tar",
        "gold/t1.diff",
    ]:
        assert (kit / rel).read_bytes() == (controls.parent / rel).read_bytes(), rel
    for name in ["run.json", "controls.yaml", "trials.jsonl", "report.md"]:
        assert (kit / "run" / name).read_bytes() == (run / name).read_bytes(), name
    assert (kit / "replay.sh").stat().st_mode & 0o777 == 0o755
    readme = (kit / "README.md").read_text()
    assert "sh replay.sh --verify-only" in readme and "sh replay.sh " in readme
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit", "orig"]  # no staging left


def _stub(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose DELTARUN records its arguments instead of running anything."""
    log = tmp_path / "stub.log"
    stub = tmp_path / "stub-deltarun"
    stub.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "deltarun ${STUB_VERSION:-'
        + __version__
        + '}"; echo "scoring sha256 ${STUB_SCORING:-'
        + scoring_sha256()
        + '}"; exit 0; fi\n'
        'printf \'%s\\n\' "$*" >> "$STUB_LOG"\n'
        'case "$1" in replay) echo "reverify: 4 verdicts re-run, ${STUB_CHANGED:-0} changed";; '
        "esac\n"
    )
    stub.chmod(0o755)
    return {**os.environ, "DELTARUN": str(stub), "STUB_LOG": str(log)}, log


def _replay_sh(kit: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(kit / "replay.sh"), *args],
        cwd="/",  # any directory: the script goes to its own
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_replay_sh_checks_digests_then_calls_deltarun(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    _, run = made
    kit = tmp_path / "kit"
    assert run_cli("export", str(run), "--kit", str(kit)).returncode == 0
    env, log = _stub(tmp_path)
    protocol = protocol_of(run)

    verify = _replay_sh(kit, env, "--verify-only")
    assert verify.returncode == 0, verify.stderr
    assert "0 changed" in verify.stdout
    assert log.read_text() == "replay run --reverify --controls controls.yaml -j 2\n"

    changed = _replay_sh(kit, {**env, "STUB_CHANGED": "1"}, "--verify-only")
    assert changed.returncode == 1 and "verdicts changed" in changed.stderr

    log.unlink()
    rerun = _replay_sh(kit, {**env, "J": "3"})
    assert rerun.returncode == 0, rerun.stderr
    calls = log.read_text().splitlines()
    out = calls[0].split()[3]
    assert out.startswith("rerun-")
    assert calls == [
        f"run controls.yaml --out {out} --expect-protocol {protocol} -j 3",
        f"compare run {out}",
    ]

    # One changed byte of tasks.jsonl: exit 3 naming the file, deltarun never called.
    log.unlink()
    tasks = kit / "suite" / "tasks.jsonl"
    data = bytearray(tasks.read_bytes())
    data[10] ^= 0x01
    tasks.write_bytes(bytes(data))
    for args in [(), ("--verify-only",)]:
        tampered = _replay_sh(kit, env, *args)
        assert tampered.returncode == 3, tampered.stderr
        assert "suite/tasks.jsonl: FAILED" in tampered.stdout
        assert "replay.sh: digest mismatch" in tampered.stderr
    assert not log.exists()


def test_replay_sh_names_the_version_the_run_was_made_with(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    _, run = made
    kit = tmp_path / "kit"
    assert run_cli("export", str(run), "--kit", str(kit)).returncode == 0
    env, log = _stub(tmp_path)
    other = _replay_sh(kit, {**env, "STUB_VERSION": "9.9.9"}, "--verify-only")
    assert other.returncode == 1
    assert other.stderr == (
        f"replay.sh: this run was made with deltarun {__version__}; {env['DELTARUN']} is 9.9.9: "
        f"install deltarun {__version__} (or set DELTARUN)\n"
    )
    assert not log.exists()  # nothing was run with the other version
    patched = _replay_sh(kit, {**env, "STUB_SCORING": "0" * 64}, "--verify-only")
    assert patched.returncode == 1 and "with other scoring code" in patched.stderr
    assert not log.exists()
    header = (kit / "replay.sh").read_text()
    assert f"# deltarun {__version__} (scoring code sha256 {scoring_sha256()}" in header


def test_export_refuses_a_non_empty_kit_directory(tmp_path: Path, made: tuple[Path, Path]) -> None:
    _, run = made
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "mine.txt").write_text("keep me\n")
    result = run_cli("export", str(run), "--kit", str(kit))
    assert result.returncode == 1 and one_line(result.stderr), result.stderr
    assert "not empty" in result.stderr
    assert [p.name for p in kit.iterdir()] == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("export", str(run), "--kit", str(empty)).returncode == 0  # empty is fine


def test_export_stops_on_a_tampered_archive_or_agent_dir(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    controls, run = made
    fixture = controls.parent / "suite" / "fixtures" / "t1.tar"
    pristine = fixture.read_bytes()
    data = bytearray(pristine)
    data[600] ^= 0x01
    fixture.write_bytes(bytes(data))
    result = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert result.returncode == 3 and one_line(result.stderr), result.stderr
    assert "t1.tar" in result.stderr and "digest mismatch" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orig"]  # nothing written

    fixture.write_bytes(pristine)
    (controls.parent / "gold" / "t0.diff").write_text(ADD_GOLD + " \n")
    result = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert result.returncode == 3 and one_line(result.stderr), result.stderr
    assert "gold" in result.stderr and "digest mismatch" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orig"]


def test_export_stops_when_the_stored_controls_miss_the_protocol(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    _, run = made
    stored = run / "controls.yaml"
    stored.write_text(stored.read_text().replace("timeout_s: 60", "timeout_s: 61", 1))
    result = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert result.returncode == 3 and one_line(result.stderr), result.stderr
    assert "hash to protocol" in result.stderr and protocol_of(run) in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orig"]


def test_moved_originals_are_found_through_controls(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    # The originals moved: run.json's controls_path is gone, --controls says where they are.
    moved = tmp_path / "moved"
    (tmp_path / "orig").rename(moved)
    lost = run_cli("export", str(moved / "run"), "--kit", str(tmp_path / "kit2"))
    assert lost.returncode == 1 and one_line(lost.stderr), lost.stderr
    assert "--controls" in lost.stderr
    found = run_cli(
        "export",
        str(moved / "run"),
        "--kit",
        str(tmp_path / "kit2"),
        "--controls",
        str(moved / "controls.yaml"),
    )
    assert found.returncode == 0, found.stderr
    exported = (tmp_path / "kit2" / "controls.yaml").read_bytes()
    assert exported == (moved / "run" / "controls.yaml").read_bytes()


def test_metrics_module_and_command_agent_keep_their_pins(tmp_path: Path) -> None:
    root = tmp_path / "orig"
    root.mkdir()
    agent = root / "agents" / "cmd"
    (agent / "empty").mkdir(parents=True)  # an empty folder and an executable bit are pinned
    (agent / "run.sh").write_text("#!/bin/sh\ntrue\n")
    (agent / "run.sh").chmod(0o755)
    source = b"def always(answer, task, wall_s):\n    return True\n"
    (root / "metrics.py").write_bytes(source)
    arms = [
        *ARMS[:1],
        {
            "name": "cmd",
            "agent": {"type": "command", "dir": "agents/cmd", "argv": ["sh", "/opt/agent/run.sh"]},
        },
    ]
    controls = make_suite(root, [repo_task("t0")], arms)
    data = yaml.safe_load(controls.read_text())
    data["metrics"] = {
        "module": "metrics.py",
        "sha256": sha256_bytes(source),
        "functions": ["always"],
    }
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    run = prepared_run(controls, root / "run")
    kit = tmp_path / "kit"
    result = run_cli("export", str(run), "--kit", str(kit))
    assert result.returncode == 0, result.stderr
    assert (kit / "metrics.py").read_bytes() == source
    assert (kit / "agents" / "cmd" / "empty").is_dir()
    assert os.access(kit / "agents" / "cmd" / "run.sh", os.X_OK)
    assert load_controls(kit / "controls.yaml").protocol_sha256 == protocol_of(run)
    script = (kit / "replay.sh").read_text()
    assert "  metrics.py\n" in script and "  agents/cmd/run.sh\n" in script

    (root / "metrics.py").write_bytes(source + b"\n")
    tampered = run_cli("export", str(run), "--kit", str(tmp_path / "kit2"))
    assert tampered.returncode == 3 and one_line(tampered.stderr), tampered.stderr
    assert "metrics.py" in tampered.stderr and "digest mismatch" in tampered.stderr


def test_absolute_and_reserved_paths_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "abs"
    root.mkdir()
    run = prepared_run(gold_suite(root), root / "run")
    stored = run / "controls.yaml"  # a run directory is input too: the strings are checked
    data = yaml.safe_load(stored.read_text())
    data["suite"]["file"] = str(root / "suite" / "tasks.jsonl")
    stored.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert result.returncode == 2 and one_line(result.stderr), result.stderr
    assert "suite.file" in result.stderr and "absolute path" in result.stderr

    root = tmp_path / "reserved"
    root.mkdir()
    controls = gold_suite(root)
    (root / "gold").rename(root / "run")  # the agent directory would land on the kit's run/
    data = yaml.safe_load(controls.read_text())
    data["arms"][1]["agent"]["dir"] = "run"
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    run = prepared_run(controls, root / "out")
    result = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert result.returncode == 1 and one_line(result.stderr), result.stderr
    assert "would land on run" in result.stderr
    assert not (tmp_path / "kit").exists()


def test_replay_reverify_finds_the_suite_or_says_pass_controls(
    tmp_path: Path, made: tuple[Path, Path]
) -> None:
    controls, run = made
    kit = tmp_path / "kit"
    assert run_cli("export", str(run), "--kit", str(kit)).returncode == 0

    # run.json's controls_path while it exists; --controls must hash to the run's protocol.
    assert reverify_inputs(RunDir(run)).suite.path == controls.parent / "suite" / "tasks.jsonl"
    kit_inputs = reverify_inputs(RunDir(kit / "run"), kit / "controls.yaml")
    assert kit_inputs.suite.path == (kit / "suite" / "tasks.jsonl").resolve()
    other = controls.parent / "other.yaml"
    data = yaml.safe_load(controls.read_text())
    data["runtime"]["seed"] = 7
    other.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProtocolMismatch):
        reverify_inputs(RunDir(kit / "run"), other)
    result = run_cli("replay", str(run), "--reverify", "--controls", str(other))
    assert result.returncode == 3 and one_line(result.stderr), result.stderr
    assert "hashes to protocol" in result.stderr
    usage = run_cli("replay", str(run), "--controls", str(kit / "controls.yaml"))
    assert usage.returncode == 2 and "--reverify" in usage.stderr

    # The originals gone: one line asking for --controls; a suite inside the run dir is used.
    shutil.rmtree(controls.parent / "suite")
    with pytest.raises(UserError, match="pass --controls"):
        reverify_inputs(RunDir(kit / "run"))
    result = run_cli("replay", str(kit / "run"), "--reverify")
    assert result.returncode == 1 and one_line(result.stderr), result.stderr
    assert "pass --controls" in result.stderr
    shutil.copytree(kit / "suite", kit / "run" / "suite")
    here = reverify_inputs(RunDir(kit / "run"))
    assert here.suite.path == (kit / "run" / "suite" / "tasks.jsonl").resolve()


@pytest.mark.docker
def test_kit_reverifies_and_reruns_with_every_original_gone(
    tmp_path: Path, docker_api: Any
) -> None:
    """A scored run: its kit carries the pinned validation.json, which the rerun needs."""
    root = tmp_path / "orig"
    root.mkdir()
    controls = gold_suite(root)
    data = yaml.safe_load(controls.read_text())
    data["channel"] = "scored"
    data["images"] = {PY_IMAGE: docker_api.inspect_image(PY_IMAGE)["Id"]}
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    validated = run_cli("validate", str(controls))
    assert validated.returncode == 0, validated.stderr
    sealed = run_cli("seal", str(controls))
    assert sealed.returncode == 0, sealed.stderr
    assert yaml.safe_load(controls.read_text())["suite"]["validation"]
    run = root / "run"
    made = run_cli("run", str(controls), "--out", str(run), "-j", "2")
    assert made.returncode == 0, made.stderr
    kit = tmp_path / "kit"
    exported = run_cli("export", str(run), "--kit", str(kit))
    assert exported.returncode == 0, exported.stderr

    def outcomes(run_dir: Path) -> set[tuple[str, str, str]]:
        lines = (run_dir / "trials.jsonl").read_text().splitlines()
        return {(r["task_id"], r["arm"], r["outcome"]) for r in map(json.loads, lines)}

    recorded = outcomes(run)
    assert recorded == {
        (t, arm, outcome)
        for t in ("t0", "t1")
        for arm, outcome in [("ctrl", "miss"), ("gold", "success")]
    }
    assert (kit / "suite" / "validation.json").read_bytes() == (
        root / "suite" / "validation.json"
    ).read_bytes()
    fresh = tmp_path / "elsewhere" / "kit"
    shutil.copytree(kit, fresh)
    shutil.rmtree(kit)
    shutil.rmtree(root)  # no original path is usable any more
    env = {**os.environ, "DELTARUN": str(EXE), "COLUMNS": "200"}

    verify = _replay_sh(fresh, env, "--verify-only")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "reverify: 4 verdicts re-run, 0 changed" in verify.stdout

    rerun = _replay_sh(fresh, env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    reruns = sorted(fresh.glob("rerun-*"))
    assert len(reruns) == 1
    assert outcomes(reruns[0]) == recorded
    assert f"rerun in {reruns[0].name}" in rerun.stdout
    run_id = json.loads((reruns[0] / "run.json").read_text())["run_id"]
    assert leftover_sandboxes(docker_api, run=run_id) == ([], [])
