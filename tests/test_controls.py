"""Controls: strict parsing, one-line errors, protocol hash, channel rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.config.loader import (
    load_controls,
    parse_controls,
    protocol_hash,
    scored_channel_problems,
)
from runner.errors import UserError
from runner.sizes import format_size, parse_size

BASE = """\
protocol_id: p
suite: {file: suite/tasks.jsonl, sha256: ""}
arms:
  - name: ctrl
    control: true
    agent: {type: scripted, action: noop}
  - name: cand
    agent: {type: patch, dir: patches}
"""


def test_parses_defaults() -> None:
    controls = parse_controls(BASE, "c.yaml")
    assert controls.control_arm == "ctrl"
    assert controls.runtime.max_retries == 0 and controls.runtime.network == "none"
    assert controls.tools.forbidden_paths == [".git/"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE.replace("protocol_id", "protocl_id"), "c.yaml: protocl_id: unknown key"),
        (BASE + "runtime: {repeets: 2}\n", "c.yaml: runtime.repeets: unknown key"),
        (
            BASE.replace("type: patch, dir: patches", "type: patch"),
            "c.yaml: arms[1].agent.patch.dir: required key is missing",
        ),
        (BASE.replace("    control: true\n", ""), "exactly one arm must have 'control: true'"),
        (BASE + "runtime: {limits: {memory: lots}}\n", "not a size"),
        ("arms: [\n", "c.yaml: line"),
        ("- just a list\n", "must be a YAML mapping"),
        (
            BASE.replace("type: patch, dir: patches", "type: openai")
            + "route: {base_url: 'http://model:8000/v1', model: m-1}\n"
            + "budget: {run_usd: 5}\n",
            "budget.run_usd cannot bound arm 'cand': type openai (deltarun's own model loop) "
            "is not priced",
        ),
    ],
)
def test_errors_are_one_line_with_the_path(text: str, expected: str) -> None:
    with pytest.raises(UserError) as excinfo:
        parse_controls(text, "c.yaml")
    message = str(excinfo.value)
    assert expected in message
    assert "\n" not in message


def test_protocol_hash_is_canonical_and_covers_agent_dirs() -> None:
    a = parse_controls(BASE, "a")
    reordered = parse_controls(
        BASE.replace(
            'suite: {file: suite/tasks.jsonl, sha256: ""}',
            'suite: {sha256: "", file: suite/tasks.jsonl}',
        ),
        "b",
    )
    assert protocol_hash(a, {"cand": "1"}) == protocol_hash(reordered, {"cand": "1"})
    assert protocol_hash(a, {"cand": "1"}) != protocol_hash(a, {"cand": "2"})
    changed = parse_controls(BASE + "runtime: {seed: 7}\n", "c")
    assert protocol_hash(a, {}) != protocol_hash(changed, {})


def test_load_hashes_agent_directory_content(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "t.diff").write_text("x")
    path = tmp_path / "controls.yaml"
    path.write_text(BASE)
    first = load_controls(path).protocol_sha256
    (tmp_path / "patches" / "t.diff").write_text("y")
    assert load_controls(path).protocol_sha256 != first
    (tmp_path / "patches" / "t.diff").unlink()
    (tmp_path / "patches").rmdir()
    with pytest.raises(UserError, match=r"arms\[1\]\.agent\.dir"):
        load_controls(path)
    with pytest.raises(UserError, match="not found"):
        load_controls(tmp_path / "nope.yaml")


def test_scored_channel_needs_every_pin() -> None:
    controls = parse_controls(
        BASE.replace("protocol_id: p", "protocol_id: p\nchannel: scored")
        + "runtime: {max_retries: 1}\n",
        "c",
    )
    problems = scored_channel_problems(controls, {"img"}, {"img": "sha256:abc"})
    assert any("suite.sha256" in p for p in problems)
    assert any("max_retries" in p for p in problems)
    assert any("'img'" in p and "sha256:abc" in p for p in problems)


def test_parse_size() -> None:
    assert parse_size("512m") == 512 << 20
    assert parse_size("1g") == 1 << 30
    assert parse_size("1GiB") == 1 << 30
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError):
        parse_size("big")
    for text in ("1g\n", "\n1g"):  # whitespace around the size, as ever
        assert parse_size(text) == 1 << 30
    with pytest.raises(ValueError, match="is not a size"):  # 9e400 is inf: never OverflowError
        parse_size("9" * 400 + "g")


def test_format_size_reads_back_as_parse_size_reads_it() -> None:
    cases = {24 << 30: "24g", 3 << 29: "1.5g", 512 << 20: "512m", 1 << 40: "1t", 100: "100"}
    for size, text in cases.items():
        assert format_size(size) == text and parse_size(text) == size
    assert format_size(25148366848) == "23.4g"  # rounded to a tenth of its unit
