"""The ledger: first record per job kept, duplicates aside, torn tails set aside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import ProtocolMismatch, UserError
from runner.records import Outcome, TaskKind, Trial
from runner.store.rundir import RunDir, RunMeta


def meta(protocol: str = "p") -> RunMeta:
    return RunMeta(
        run_id="r",
        protocol_id="x",
        protocol_sha256=protocol,
        suite_sha256="s",
        channel="exploratory",
        control_arm="c",
        arms=["c"],
        tasks=[],
        image_digests={},
        agent_dir_digests={},
        created_at="now",
        deltarun_version="0",
        python_version="3",
    )


def record(job: str, outcome: Outcome = Outcome.MISS) -> Trial:
    return Trial(
        run_id="r",
        job_id=job,
        protocol_sha256="p",
        task_id="t",
        arm="c",
        repeat=0,
        task_kind=TaskKind.ORDINARY,
        outcome=outcome,
        passed=outcome is Outcome.SUCCESS,
        timeout=False,
        tool_violation=False,
        abstained=False,
        wall_s=1.0,
        worker="w",
        started_at="s",
        finished_at="f",
    )


def test_first_record_wins_and_duplicates_are_kept_aside(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.create(meta(), b"controls")
    assert run.append(record("j1", Outcome.SUCCESS))
    assert not run.append(record("j1", Outcome.MISS))
    assert run.append(record("j2"))
    trials = RunDir(tmp_path / "run").trials()
    assert [(t.job_id, t.outcome) for t in trials] == [
        ("j1", Outcome.SUCCESS),
        ("j2", Outcome.MISS),
    ]
    dup = (tmp_path / "run" / "trials.duplicates.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in dup] == ["miss"]


def test_torn_tail_is_set_aside_not_lost(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.create(meta(), b"controls")
    run.append(record("j1"))
    with run.ledger_path.open("a") as handle:
        handle.write('{"run_id": "r", "job_')
    with pytest.raises(UserError, match=r"trials\.jsonl:2: truncated record"):
        run.trials()
    run.repair_torn_tail()
    assert run.ledger_path.read_text().endswith("\n")
    assert (tmp_path / "run" / "trials.torn").read_text() == '{"run_id": "r", "job_\n'
    run.append(record("j2"))
    assert [t.job_id for t in RunDir(tmp_path / "run").trials()] == ["j1", "j2"]


def test_protocol_mismatch(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.create(meta("p1"), b"controls")
    assert run.check_protocol("p1").run_id == "r"
    with pytest.raises(ProtocolMismatch, match="belongs to protocol p1"):
        run.check_protocol("p2")


def test_a_session_is_kept_beside_the_ledger_named_by_its_digest(tmp_path: Path) -> None:
    import base64
    import gzip
    import hashlib

    from runner.agents.installed.session import session_archive
    from runner.sandbox.base import ModelCall

    run = RunDir(tmp_path / "run")
    run.create(meta(), b"protocol_id: p\n")
    calls = [ModelCall(200, "m", 10, 2, tool_calls=("Bash",))]
    archive = session_archive({"../escape": b"x", "log/a.jsonl": b"{}"}, "out", calls)
    carried = record("j1").model_copy(update={"session": base64.b64encode(archive).decode()})
    run.append(carried)
    run.write_records([record("j2").model_copy(update={"session": carried.session})], [])
    lines = [json.loads(line) for line in run.ledger_path.read_text().splitlines()]
    digest = hashlib.sha256(archive).hexdigest()
    assert [(r["session"], r["session_sha256"]) for r in lines] == [(None, digest)] * 2
    kept = tmp_path / "run" / "sessions" / f"{digest}.tar.gz"
    assert kept.read_bytes() == archive
    names = gzip.decompress(archive)
    assert b"home/log/a.jsonl" in names and b"escape" not in names  # a hostile name dropped
    assert record("j3").model_copy(update={"session": "not base64!"}).session is not None
    run.append(record("j3").model_copy(update={"session": "not base64!"}))
    assert json.loads(run.ledger_path.read_text().splitlines()[-1])["session_sha256"] is None


def test_a_session_over_the_cap_leaves_out_its_largest_files_first() -> None:
    import gzip
    import io
    import os
    import tarfile

    from runner.agents.installed.session import session_archive

    files = {"big": os.urandom(300_000), "small": b"kept"}
    archive = session_archive(files, "stdout", [], cap=100_000)
    assert len(archive) <= 100_000
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        names = tar.getnames()
        cut = tar.extractfile("cut.txt").read().decode()  # type: ignore[union-attr]
    assert "home/small" in names and "home/big" not in names
    assert "home/big (300000 bytes)" in cut
    assert session_archive(files, "stdout", [], cap=100_000) == archive  # same bytes
