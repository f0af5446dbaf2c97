"""tasks.jsonl read as JSON Lines, within bounds: lines end at \\n only, each parsed by the
bounded parser, errors naming FILE:LINE (runner.suite.lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import UserError
from runner.suite.lines import TASKS_MAX_BYTES, task_lines
from runner.suite.load import load_suite, read_tasks, seal
from tests.helpers import make_suite, repo_task

ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


def test_a_prompt_holding_a_unicode_line_separator_survives_seal_and_load(tmp_path: Path) -> None:
    """JSON may hold U+2028, U+0085 and the like unescaped, and seal writes them so;
    ``str.splitlines`` would cut the line there."""
    prompt = "Fix add().\u2028Then\u0085check\x1c, \x1d and \x1e."
    make_suite(tmp_path, [{**repo_task("t1"), "prompt": prompt}], ARMS, seal=False)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    line = json.loads(tasks.read_text(encoding="utf-8").splitlines()[0])  # \u-escaped
    tasks.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    assert "\u2028" in tasks.read_text(encoding="utf-8")
    digest = seal(tasks)
    (task,) = load_suite(tasks, digest).tasks
    assert task.prompt == prompt


def test_crlf_and_blank_lines_and_the_numbers_of_lines(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    one = json.dumps({**repo_task("t1"), "repo": "a.tar"})
    two = json.dumps({**repo_task("t2"), "repo": "b.tar"})
    tasks.write_bytes(f"{one}\r\n\r\n  \n{two}\r\n".encode())
    assert [(line.number, line.data["id"]) for line in task_lines(tasks)] == [(1, "t1"), (4, "t2")]
    assert [task.id for task in read_tasks(tasks)] == ["t1", "t2"]
    tasks.write_bytes(f"{one}\n\n[[[[[1]]]]]\n".encode())
    with pytest.raises(UserError, match=r"tasks.jsonl:3: a task line must be a JSON object"):
        read_tasks(tasks)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[" * 65 + b"]" * 65, "nested deeper than 64 levels"),
        (b'{"id": ' + b"1" * 65 + b"}", "a number with 65 characters"),
        (b'{"id": NaN}', "NaN is not JSON"),
        (b'{"id": 1e999}', "too large for a float"),
        (b'{"id": "\\ud800"}', "a lone surrogate"),
        (b'{"id": "\xff"}', "not valid UTF-8"),
        (b'{"id": ', "Expecting value"),
    ],
)
def test_a_line_past_the_bounds_is_one_line_naming_it(
    tmp_path: Path, line: bytes, reason: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b"\n" + line + b"\n")
    with pytest.raises(UserError, match=r"tasks.jsonl:2: not valid JSON \(") as info:
        task_lines(tasks)
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_the_file_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    with tasks.open("wb") as handle:
        handle.truncate(TASKS_MAX_BYTES + 1)
    with pytest.raises(UserError, match=f"over the cap of {TASKS_MAX_BYTES} for tasks.jsonl"):
        task_lines(tasks)
