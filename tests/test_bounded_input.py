"""runner.bounded_input: files read within a cap, YAML loaded within bounds, messages that
quote input kept to one short printable line."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.bounded_input import (
    MAX_MESSAGE,
    YamlBounds,
    excerpt,
    load_yaml,
    one_line,
    read_capped,
    yaml_refusal,
)
from runner.bounded_json import BoundsError
from runner.errors import UsageError, UserError


def test_read_capped_reads_a_file_within_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert read_capped(path, 3, "a file") == b"abc"
    with pytest.raises(UserError, match=r"f: 3 bytes, over the cap of 2 for a file"):
        read_capped(path, 2, "a file")
    with pytest.raises(UsageError):
        read_capped(path, 2, "a file", UsageError)
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "missing", 2, "a file")


def test_read_capped_takes_the_size_from_the_file_before_reading(tmp_path: Path) -> None:
    import tracemalloc

    sparse = tmp_path / "sparse"
    with sparse.open("wb") as handle:
        handle.truncate(8 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="8589934592 bytes, over the cap"):
            read_capped(sparse, 1 << 20, "a file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_read_capped_refuses_a_fifo_instead_of_waiting_on_it(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.jsonl"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_capped(fifo, 100, "tasks.jsonl")
        except UserError as exc:
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock the reader before failing
        with open(fifo, "wb"):
            pass
    assert done and "not a regular file" in str(done[0])


def test_load_yaml_is_safe_load_within_the_bounds() -> None:
    text = "a: [1, 2.5, x]\nb: {c: null, d: true}\ne: '3.10'\nf: 0x1f\n"
    assert load_yaml(text) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1\n")
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: !!python/object:os.system x\n")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: " + "[" * 33 + "]" * 33 + "\n", "nested deeper than 32 levels at line 1"),
        ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 40)), "nested deeper than 32"),
        ("a: " + "9" * 65 + "\n", "an integer of more than 64 digits"),
        ("a: 0x" + "f" * 60 + "\n", "an integer of more than 64 digits"),
        ("a: " + "9" * 5000 + "\n", "a number of 5000 characters at line 1"),
        ("a: 1" + ":59" * 200 + "\n", "a number of 601 characters"),
        ("a: &x [1, {b: *x}]\n", "an alias inside the node it names (*x) at line 1"),
        ("a: .nan\n", "a number that is not finite (nan)"),
        ("a: [-.inf]\n", "a number that is not finite (-inf)"),
        ("{" + ", ".join(f"k{i}: {i}" for i in range(200)) + "}", "more than 100 values"),
    ],
)
def test_load_yaml_refuses_past_its_bounds(text: str, reason: str) -> None:
    with pytest.raises(BoundsError, match=re.escape(reason)):
        load_yaml(text, YamlBounds(max_nodes=100))


def test_load_yaml_counts_an_alias_as_what_it_repeats() -> None:
    """A route shared by anchor loads; a billion laughs is refused before it is built."""
    shared = "route: &r {base_url: 'http://x/v1', model: m}\narms: [{route: *r}, {route: *r}]\n"
    assert load_yaml(shared)["arms"][1]["route"]["model"] == "m"
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 30)]
    with pytest.raises(BoundsError, match=r"more than 100000 values \(an alias counts as what"):
        load_yaml("\n".join(lines))
    with pytest.raises(BoundsError, match="more than 91 values"):
        load_yaml("\n".join(lines[:2]), YamlBounds(max_nodes=91))
    with pytest.raises(BoundsError, match="nested deeper than 5 levels at line 2"):
        load_yaml("a: &x [[[1]]]\nb: [[[*x]]]\n", YamlBounds(max_depth=5))  # 3 + 3 levels
    with pytest.raises(BoundsError, match="over 10 characters"):
        load_yaml("a: 12345678901", YamlBounds(max_chars=10))


def test_excerpt_quotes_a_bounded_prefix() -> None:
    assert excerpt("abc") == "'abc'"
    assert excerpt("x" * 100, 5) == "'xxxxx'… (100 characters)"
    assert excerpt(b"\xff" * 9, 2) == "b'\\xff\\xff'… (9 bytes)"
    assert excerpt(10**5000) == "an integer of 16610 bits"
    assert excerpt([1] * 7) == "a list of 7 items"
    assert excerpt(None) == "None"


def test_one_line_keeps_the_start_and_the_end_of_a_long_message() -> None:
    message = "/suite/tasks.jsonl:1: " + "x" * 10_000 + "; run deltarun seal"
    line = one_line(message)
    assert len(line) == MAX_MESSAGE
    assert line.startswith("/suite/tasks.jsonl:1: xxx") and line.endswith("; run deltarun seal")
    assert one_line("short") == "short"
    # a terminal escape sequence is dropped whole; other control characters are escaped
    assert one_line("a\nb\x1b[2J\ud800") == "a\\nb\\ud800"


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=2000), st.integers(20, 900))
def test_one_line_is_one_printable_line_within_the_limit(message: str, limit: int) -> None:
    line = one_line(message, limit)
    assert len(line) <= limit and line.isprintable()
    line.encode("utf-8")  # no lone surrogate left to break the terminal's encoder
    if message.isprintable() and len(message) <= limit:
        assert line == message


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\nb: 2\na: 3\n",  # top level
        "arms:\n  - {name: x, agent: {type: scripted}, name: y}\n",  # in a flow mapping
        "x:\n  deep:\n    k: 1\n    k: 1\n",  # the same value twice is still two keys
        "1: a\n1: b\n",  # a number key
    ],
)
def test_load_yaml_refuses_a_key_given_twice(text: str) -> None:
    # YAML loaders keep the last value: a reviewer reading the first would read another file.
    with pytest.raises(yaml.YAMLError) as raised:
        load_yaml(text)
    line = yaml_refusal("c.yaml", raised.value)
    assert "is given twice" in line and line.startswith("c.yaml: line ") and "\n" not in line


def test_load_yaml_keeps_merge_keys_and_equal_keys_in_different_mappings() -> None:
    text = "base: &b {p: 1}\nm:\n  <<: *b\n  q: 2\nn: {p: 3}\n"
    assert load_yaml(text) == {"base": {"p": 1}, "m": {"p": 1, "q": 2}, "n": {"p": 3}}


def test_a_controls_file_with_a_key_twice_is_one_line(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    controls = tmp_path / "controls.yaml"
    controls.write_text("protocol_id: p\nchannel: exploratory\nchannel: scored\n")
    result = run_cli("validate", str(controls))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"deltarun: error: {controls}: line 3: the key 'channel' is given twice (YAML would "
        "keep the last one without a word); keep one"
    )
