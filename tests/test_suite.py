"""Sealing and verifying suites: digests written, one changed byte caught, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import ArchiveError, DigestMismatch, UserError
from runner.hashing import sha256_file
from runner.suite.load import load_suite, read_tasks, seal
from tests.helpers import make_suite, repo_task

ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


def test_one_changed_byte_is_a_digest_mismatch(tmp_path: Path) -> None:
    make_suite(tmp_path, [repo_task("t1")], ARMS)
    tasks_path = tmp_path / "suite" / "tasks.jsonl"
    digest = sha256_file(tasks_path)
    hidden = tmp_path / "suite" / "hidden" / "t1.tar"
    pinned = sha256_file(hidden)
    data = bytearray(hidden.read_bytes())
    data[-1] ^= 1
    hidden.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch) as excinfo:
        load_suite(tasks_path, digest)
    message = str(excinfo.value)
    assert str(hidden) in message and pinned in message and sha256_file(hidden) in message
    # And a changed tasks.jsonl is caught against the controls' pin.
    tasks_path.write_text(tasks_path.read_text().replace("Fix add()", "Fix add() now"))
    with pytest.raises(DigestMismatch, match=r"tasks\.jsonl"):
        load_suite(tasks_path, digest)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "tasks.jsonl:1: not valid JSON"),
        (
            '{"id": "a", "kind": "ordinary", "prompt": "p", "repo": "r.tar", "hidden": "h.tar", "hidden_test": "t", "colour": 1}',
            "tasks.jsonl:1: colour: unknown key",
        ),
        (
            '{"id": "a", "kind": "ordinary", "prompt": "p", "repo": "r.tar"}',
            "needs 'hidden' and 'hidden_tests'",
        ),
        (
            '{"id": "a", "kind": "sideways", "prompt": "p", "expect": 1, "metrics": ["exact_match"], "deadline_s": 5}',
            "tasks.jsonl:1: kind",
        ),
        ('{"id": "a", "kind": "ordinary", "prompt": "p"}', "needs 'repo'"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_task_lines(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError) as excinfo:
        read_tasks(path)
    assert expected in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_unsealed_or_unsafe_archives(tmp_path: Path) -> None:
    make_suite(tmp_path, [repo_task("t1")], ARMS, seal=False)
    tasks_path = tmp_path / "suite" / "tasks.jsonl"
    with pytest.raises(UserError, match="repo_sha256 is empty; run `deltarun seal`"):
        load_suite(tasks_path, None)
    import tarfile

    with tarfile.open(tmp_path / "suite" / "fixtures" / "t1.tar", "w") as archive:
        info = tarfile.TarInfo("evil")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/shadow"
        archive.addfile(info)
    with pytest.raises(ArchiveError, match="symbolic link"):
        seal(tasks_path)


def test_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    line = json.dumps({"id": "a", "kind": "negative", "prompt": "p", "repo": "r.tar"})
    path.write_text(line + "\n" + line + "\n")
    with pytest.raises(UserError, match=r"tasks\.jsonl:2: id: 'a' appears twice"):
        read_tasks(path)


def test_hidden_in_fixture_finds_a_hidden_file_the_agent_would_have() -> None:
    """What run.json records for the checklist's hidden-test row: same path and bytes, and
    not a forbidden path (removed before the agent starts)."""
    from runner.run.prepare import _exposures
    from runner.suite.load import Suite, hidden_in_fixture
    from runner.trees.archives import Member

    def file(path: str, data: bytes) -> Member:
        return Member(path, False, data, False)

    hidden = [file("tests/test_hidden.py", b"assert x"), Member("tests", True, b"", False)]
    assert hidden_in_fixture([file("calc.py", b"x = 1")], hidden) == ()
    leaked = [file("calc.py", b"x = 1"), file("tests/test_hidden.py", b"assert x")]
    assert hidden_in_fixture(leaked, hidden) == ("tests/test_hidden.py",)
    # An older version of the file, replaced by the hidden one, is not the hidden test.
    assert hidden_in_fixture([file("tests/test_hidden.py", b"old")], hidden) == ()
    suite = Suite(Path("tasks.jsonl"), "s", (), {"t1": ("tests/test_hidden.py",), "t2": ()})
    assert _exposures(suite, []) == {"t1": "tests/test_hidden.py", "t2": ""}
    assert _exposures(suite, ["tests/"]) == {"t1": "", "t2": ""}


def test_load_suite_finds_a_hidden_test_shipped_in_the_fixture(tmp_path: Path) -> None:
    from runner.config.loader import load_controls
    from runner.suite.load import load_suite
    from tests.helpers import ADD_FIXTURE, ADD_HIDDEN, make_suite, repo_task

    arms = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]
    leaky = {**ADD_FIXTURE, **ADD_HIDDEN}  # the fixture ships the hidden test itself
    controls = make_suite(
        tmp_path, [repo_task("t1"), repo_task("t2")], arms, fixtures={"t2": leaky}
    )
    loaded = load_controls(controls)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    assert suite.exposed == {"t1": (), "t2": ("tests/test_hidden.py",)}
