"""Hostile suite input (DESIGN rule 6: every parse of suite input is bounded before it
allocates), fed to ``seal``, ``validate``, ``run`` and ``import swebench`` through the real
entry point: deep nesting, huge integers, NaN and Infinity, bytes that are not UTF-8, lone
surrogates, huge lines, truncated and corrupt tars, tars claiming huge GNU long names and
pax headers, gzip bombs, YAML alias bombs and deep YAML, wrong types in every field.

Each refusal must be exit 1 (2 for a specs file: ``UsageError``, as ever) with one line of
at most ``MAX_LINE`` characters on stderr and no traceback. Generated cases run in this
process (``hostile_kit.in_process``); the measured attacks run in a child whose address
space is capped at 1 GiB, and its peak resident memory is checked too.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.hashing import sha256_bytes
from tests.adversarial.hostile_kit import (
    MAX_RSS,
    assert_refused,
    claiming_tar,
    gzip_bomb,
    gzip_claiming_tar,
    header,
    in_process,
    limited,
    nested,
    padded,
)
from tests.helpers import ADD_FIXTURE, make_suite, repo_task, tar_bytes

Held = Callable[..., None]
PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, database=None)
ARMS = [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}]
INSTANCE: dict[str, Any] = {
    "instance_id": "acme__calc-1",
    "repo": "acme/calc",
    "base_commit": "a" * 40,
    "patch": "",
    "test_patch": "",
    "problem_statement": "Fix add().",
    "version": "1.0",
    "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
    "PASS_TO_PASS": [],
}
WRONG = {"x": [1, {"y": None}]}  # no field of a task, a controls file or an instance takes it


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No sandbox may start: were an input to pass, ``run`` stops at the engine instead."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


def suite(root: Path) -> tuple[Path, dict[str, Any]]:
    """A sealed one-task suite, unpinned in its controls (so ``run`` parses tasks.jsonl),
    and its sealed task line."""
    controls = make_suite(root, [repo_task("t1")], ARMS)
    controls.write_text(controls.read_text().replace("sha256: ", "sha256: ''  # ", 1))
    return controls, json.loads((root / "suite" / "tasks.jsonl").read_text())


def json_value(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def in_field(line: dict[str, Any], field: str, raw: bytes) -> bytes:
    """``line`` as JSON with ``field``'s value replaced by the raw JSON text ``raw``."""
    marker = "\x00MARK\x00"
    return json_value({**line, field: marker}).replace(json_value(marker), raw)


def hostile_json(fields: list[str]) -> st.SearchStrategy[tuple[str, str, bytes]]:
    """(what, field, raw JSON value): every kind of value a bounded parse refuses."""
    deep = st.integers(65, 120_000).map(lambda n: ("deep", nested(n)))
    big = st.integers(65, 20_000).map(lambda n: ("huge integer", b"9" * n))
    nonfinite = st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400"])
    surrogate = st.sampled_from([b'"\\ud800"', b'"a\\udfffb"', b'["\\udbff"]'])
    bad_utf8 = st.binary(min_size=1, max_size=8).map(lambda b: ("not UTF-8", b'"' + b + b'\xff"'))
    wrong = st.just(("wrong type", json_value(WRONG)))
    values = st.one_of(
        deep,
        big,
        nonfinite.map(lambda raw: ("not finite", raw)),
        surrogate.map(lambda raw: ("lone surrogate", raw)),
        bad_utf8,
        wrong,
    )
    return st.tuples(values, st.sampled_from(fields)).map(lambda p: (p[0][0], p[1], p[0][1]))


def test_hostile_task_lines_are_one_line_refusals(tmp_path: Path, held: Held) -> None:
    controls, task = suite(tmp_path)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    seen: set[str] = set()

    @PROPERTY
    @given(hostile_json(sorted(task)), st.sampled_from(["seal", "validate", "run"]), st.data())
    def check(case: tuple[str, str, bytes], command: str, data: st.DataObject) -> None:
        what, field, raw = case
        line = in_field(task, field, raw)
        if data.draw(st.booleans(), "cut"):  # or a truncated line
            line = line[: data.draw(st.integers(1, len(line) - 1), "at")]
            what = "truncated line"
        tasks.write_bytes(line + b"\n")
        args = [command, str(controls)] + (["--out", str(tmp_path / "out")] * (command == "run"))
        assert_refused(in_process(*args), 1, "tasks.jsonl:1")
        seen.add(what)

    check()
    tasks.write_bytes(in_field(task, "prompt", b'"' + b"a" * (9 << 20) + b'"') + b"\n")
    assert_refused(in_process("seal", str(controls)), 1, "over 8388608 bytes")
    held(
        "hostile task lines",
        f"{', '.join(sorted(seen))}, a 9 MiB line; seal, validate, run",
        "exit 1, one line naming tasks.jsonl:LINE",
    )


def tar_cases() -> st.SearchStrategy[tuple[str, bytes]]:
    """Archives that are corrupt, truncated or claim what they do not hold."""
    valid = tar_bytes(ADD_FIXTURE)
    truncated = st.integers(1, len(valid) - 1).map(lambda n: ("truncated tar", valid[:n]))
    flipped = st.tuples(st.integers(0, 511), st.integers(1, 255)).map(
        lambda p: (
            "corrupt header",
            valid[: p[0]] + bytes([valid[p[0]] ^ p[1]]) + valid[p[0] + 1 :],
        )
    )
    claims = st.tuples(
        st.sampled_from([b"L", b"K", b"x", b"g"]), st.integers((64 << 10) + 1, 1 << 40)
    ).map(lambda c: (f"{c[0].decode()} header claiming {c[1]}", claiming_tar(c[0], c[1], 4096)))
    sparse = st.just(("GNU sparse member", header(b"s", b"S", 1 << 30) + b"\0" * 1024))
    chain = st.integers(9, 400).map(
        lambda n: (
            "pax chain",
            padded(b"".join(header(b"p", b"x", 12) + padded(b"12 a=bcdefg\n") for _ in range(n))),
        )
    )
    digits = st.integers(4400, 60_000).map(
        lambda n: ("pax length digits", header(b"p", b"x", n + 4) + padded(b"9" * n + b" a=\n"))
    )
    compressed = st.sampled_from([b"BZh91AY&SY", b"\xfd7zXZ\x00\x00"]).map(lambda h: ("bz2/xz", h))
    return st.one_of(truncated, flipped, claims, sparse, chain, digits, compressed)


def test_hostile_archives_are_refused_in_one_line(tmp_path: Path, held: Held) -> None:
    controls, task = suite(tmp_path)
    unpinned = controls.read_text()
    tasks = tmp_path / "suite" / "tasks.jsonl"
    fixture = tmp_path / "suite" / "fixtures" / "t1.tar"
    seen: set[str] = set()

    @PROPERTY
    @given(tar_cases(), st.booleans(), st.sampled_from(["seal", "run"]))
    def check(case: tuple[str, bytes], compress: bool, command: str) -> None:
        what, data = case
        controls.write_text(unpinned)  # a seal that accepted the last one pinned it
        if compress:
            import gzip

            data = gzip.compress(data, mtime=0)
        fixture.write_bytes(data)
        line = {**task, "repo_sha256": sha256_bytes(data)}  # pinned: run reads it too
        tasks.write_text(json.dumps(line) + "\n")
        args = [command, str(controls)] + (["--out", str(tmp_path / "out")] * (command == "run"))
        outcome = in_process(*args)
        if outcome.code == 0 or (command == "run" and "Docker" in outcome.stderr):
            with tarfile.open(fixture) as archive:  # still a readable archive: accepted
                assert archive.getmembers()
            return
        assert_refused(outcome, 1, "t1.tar")
        seen.add(what.split(" claiming")[0])

    check()
    held(
        "hostile fixture archives",
        f"{', '.join(sorted(seen))}; plain and gzip; seal, run",
        "exit 1, one line naming the archive; tarfile never reads a claimed header",
    )


def yaml_cases() -> st.SearchStrategy[tuple[str, str]]:
    """YAML that a bounded load refuses, as (what, text put before valid controls); the
    extremes always among the cases (PyYAML's own composer recurses past 1,000 frames
    from about 330 levels, and ``int`` refuses 4,300 digits)."""
    laughs = st.integers(8, 14).map(
        lambda k: (
            "alias bomb",
            "lol0: &l0 [x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, k)),
        )
    )
    flow = st.one_of(st.just(900), st.integers(33, 900)).map(
        lambda n: ("deep flow YAML", f"deep: {'[' * n}1{']' * n}\n")
    )
    block = st.one_of(st.just(400), st.integers(33, 400)).map(
        lambda n: (
            "deep block YAML",
            "deep:\n"
            + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(n))
            + "  " * (n + 1)
            + "v: 1\n",
        )
    )
    big = st.one_of(st.just(9000), st.integers(65, 9000)).map(
        lambda n: ("huge integer", f"big: {'9' * n}\n")
    )
    nonfinite = st.sampled_from([".nan", ".inf", "-.inf"]).map(
        lambda v: ("not finite", f"nf: {v}\n")
    )
    loop = st.just(("recursive alias", "loop: &loop [1, {again: *loop}]\n"))
    return st.one_of(laughs, flow, block, big, nonfinite, loop)


CONTROLS_FIELDS = [
    ("protocol_id",),
    ("channel",),
    ("suite", "file"),
    ("runtime", "timeout_s"),
    ("runtime", "verify_timeout_s"),
    ("runtime", "limits"),
    ("tools", "allowlist"),
    ("tools", "forbidden_paths"),
    ("arms",),
]


def test_hostile_controls_are_one_line_refusals(tmp_path: Path, held: Held) -> None:
    controls, _ = suite(tmp_path)
    clean = yaml.safe_load(controls.read_text())
    seen: set[str] = set()

    @PROPERTY
    @given(
        st.one_of(
            yaml_cases(),
            st.sampled_from(CONTROLS_FIELDS).map(lambda f: (f"wrong type in {'.'.join(f)}", f)),
            st.binary(min_size=1, max_size=6).map(lambda b: ("not UTF-8", b"\xff" + b)),
        ),
        st.sampled_from(["seal", "validate", "run"]),
    )
    def check(case: tuple[str, Any], command: str) -> None:
        what, payload = case
        if isinstance(payload, tuple):
            document = json.loads(json.dumps(clean))
            parent = document
            for key in payload[:-1]:
                parent = parent[key]
            parent[payload[-1]] = WRONG
            controls.write_text(yaml.safe_dump(document))
        elif isinstance(payload, bytes):
            controls.write_bytes(yaml.safe_dump(clean).encode() + b"x: '" + payload + b"'\n")
        else:
            controls.write_text(payload + yaml.safe_dump(clean))
        args = [command, str(controls)] + (["--out", str(tmp_path / "out")] * (command == "run"))
        assert_refused(in_process(*args), 1, "controls.yaml")
        seen.add(what.split(" in ")[0])

    check()
    controls.write_text(yaml.safe_dump({**clean, "k" * 100_000: 1}))
    assert_refused(in_process("seal", str(controls)), 1, "unknown key")
    held(
        "hostile controls.yaml",
        f"{', '.join(sorted(seen))}, a 100,000-character key; seal, validate, run",
        "exit 1, one line naming controls.yaml",
    )


PREDICTION = {"instance_id": "acme__calc-1", "model_name_or_path": "m", "model_patch": ""}


def test_hostile_swebench_files_are_one_line_refusals(tmp_path: Path, held: Held) -> None:
    (tmp_path / "repos").mkdir()
    instances, predictions = tmp_path / "instances.json", tmp_path / "preds.jsonl"
    seen: set[str] = set()
    cases = st.one_of(
        hostile_json(sorted(INSTANCE)).map(lambda c: ("instances", *c)),
        hostile_json(sorted(PREDICTION)).map(lambda c: ("predictions", *c)),
    )

    @PROPERTY
    @given(cases, st.booleans())
    def check(case: tuple[str, str, str, bytes], array: bool) -> None:
        where, what, field, raw = case
        row = in_field(INSTANCE if where == "instances" else PREDICTION, field, raw)
        rows = b"[" + row + b"]" if array else row + b"\n"  # a JSON array or JSON Lines
        instances.write_bytes(rows if where == "instances" else json_value(INSTANCE))
        predictions.write_bytes(rows if where == "predictions" else b"")
        args = ["import", "swebench", str(instances), "--repos", str(tmp_path / "repos")]
        args += ["--out", str(tmp_path / "out"), "--predictions", f"m={predictions}"]
        assert_refused(in_process(*args), 1)  # a wrong type nobody reads: no clone, exit 1
        assert not (tmp_path / "out").exists()
        seen.add(f"{what} ({where})")

    check()
    held(
        "hostile SWE-bench instances and predictions",
        f"{len(seen)} kinds: {', '.join(sorted(seen))[:200]}",
        "exit 1, one line; nothing written",
    )


SPEC_KEYS = ["install", "pre_install", "pip_packages", "python", "env_vars", "test_cmd"]


def test_hostile_specs_are_one_line_refusals(tmp_path: Path, held: Held) -> None:
    (tmp_path / "repos").mkdir()
    instances, specs = tmp_path / "instances.jsonl", tmp_path / "specs.yaml"
    instances.write_bytes(json_value(INSTANCE) + b"\n")
    seen: set[str] = set()
    wrong = st.sampled_from(SPEC_KEYS).map(
        lambda key: (f"wrong type in {key}", yaml.safe_dump({"acme/calc": {"1.0": {key: WRONG}}}))
    )

    @PROPERTY
    @given(st.one_of(yaml_cases(), wrong))
    def check(case: tuple[str, str]) -> None:
        what, text = case
        specs.write_text(text if what.startswith("wrong") else text + "acme/calc: {}\n")
        args = ["import", "swebench", str(instances), "--repos", str(tmp_path / "repos")]
        args += ["--out", str(tmp_path / "out"), "--specs", str(specs)]
        assert_refused(in_process(*args), 2, "specs.yaml")  # specs: UsageError, as ever
        seen.add(what.split(" in ")[0])

    check()
    held(
        "hostile SWE-bench specs",
        ", ".join(sorted(seen)),
        "exit 2 (the specs' usage error), one line naming specs.yaml",
    )


def _tasks(root: Path, line: bytes) -> list[str]:
    controls, _ = suite(root)
    (root / "suite" / "tasks.jsonl").write_bytes(line)
    return ["seal", str(controls)]


def _fixture(root: Path, data: bytes) -> list[str]:
    controls, _ = suite(root)
    (root / "suite" / "fixtures" / "t1.tar").write_bytes(data)
    return ["seal", str(controls)]


def _alias_bomb(root: Path) -> list[str]:
    controls, _ = suite(root)
    bomb = "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n" for i in range(14)
    )
    controls.write_text(bomb + controls.read_text())
    return ["run", str(controls), "--out", str(root / "out")]


def _huge_file(root: Path) -> list[str]:
    controls, _ = suite(root)
    with (root / "suite" / "tasks.jsonl").open("r+b") as handle:
        handle.truncate(1 << 31)  # 2 GiB, sparse: refused by its size
    return ["seal", str(controls)]


def _bomb_past_total(root: Path) -> list[str]:
    controls, _ = suite(root)
    text = controls.read_text().replace(
        "runtime:\n", "runtime:\n  archive: {max_total_bytes: 64m}\n"
    )
    controls.write_text(text)
    (root / "suite" / "fixtures" / "t1.tar").write_bytes(gzip_bomb([32 << 20] * 4))
    return ["seal", str(controls)]


def _deep_instances(root: Path) -> list[str]:
    (root / "repos").mkdir()
    (root / "instances.json").write_bytes(nested(100_000))
    return ["import", "swebench", str(root / "instances.json"), "--repos", str(root / "repos"),
            "--out", str(root / "out")]  # fmt: skip


MEASURED: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "gzip tar, GNU long name claiming 128 MiB": (
        lambda r: _fixture(r, gzip_claiming_tar(b"L", 128 << 20)),
        "GNU long name header of 134217728 bytes",
    ),
    "gzip tar, pax header claiming 128 MiB": (
        lambda r: _fixture(r, gzip_claiming_tar(b"x", 128 << 20)),
        "pax header of 134217728 bytes",
    ),
    "gzip bomb, one member of 1 GiB of zeros": (
        lambda r: _fixture(r, gzip_bomb([1 << 30])),
        "over the cap of 67108864",
    ),
    "gzip bomb past max_total_bytes (64m)": (_bomb_past_total, "more than 67108864 bytes"),
    "task line nested 100,000 deep": (
        lambda r: _tasks(r, nested(100_000) + b"\n"),
        "nested deeper than 64",
    ),
    "5,000-digit integer in a task line": (
        lambda r: _tasks(r, in_field(repo_task("t1"), "timeout_s", b"9" * 5000) + b"\n"),
        "a number with 5000 characters",
    ),
    "2 GiB tasks.jsonl": (_huge_file, "over the cap of 134217728"),
    "YAML alias bomb of 9^13 nodes (run)": (_alias_bomb, "an alias counts as what it repeats"),
    "instances file nested 100,000 deep (import)": (_deep_instances, "nested deeper than 32"),
}


@pytest.mark.parametrize("attack", sorted(MEASURED))
def test_measured_attacks_stay_within_memory(tmp_path: Path, held: Held, attack: str) -> None:
    """In a child capped at 1 GiB of address space: the refusal, and its peak memory."""
    make, needle = MEASURED[attack]
    outcome = limited(make(tmp_path))
    assert_refused(outcome, 1, needle)
    assert outcome.max_rss < MAX_RSS, outcome.max_rss
    peak = f"peak {outcome.max_rss >> 20} MiB"
    held(attack, "the real CLI, address space capped at 1 GiB", f"exit 1, one line; {peak}")
