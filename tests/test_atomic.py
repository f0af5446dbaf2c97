"""runner.atomic.write_atomic: whole or nothing, the file's mode kept, no temporary left."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from runner.atomic import write_atomic


def test_a_new_file_is_written_with_mode_0644(tmp_path: Path) -> None:
    target = tmp_path / "tasks.jsonl"
    write_atomic(target, b"one\n")
    assert target.read_bytes() == b"one\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_bytes(b"old")
    target.chmod(0o750)
    write_atomic(target, lambda out: out.write(b"new"))
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o750


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "controls.yaml"
    target.write_bytes(b"kept")

    def half(out: BinaryIO) -> None:
        out.write(b"half of it")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_atomic(target, half)
    assert target.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["controls.yaml"]
