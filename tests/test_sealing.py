"""``deltarun seal`` on controls.yaml: the digest is pinned by a round-trip YAML edit.

Every form of ``suite`` a user may write (flow or block, quoted or plain, with or
without ``sha256``, with a stale pin, with comments around it) ends up with the
digest loadable by the real loader, every comment and every other line kept, and a
second seal changing nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from runner.config.loader import load_controls, parse_controls
from runner.errors import UserError
from runner.hashing import sha256_file
from runner.suite.load import load_suite, seal
from runner.suite.sealing import pin_suite_digest, seal_target
from tests.conftest import run_cli
from tests.helpers import make_suite, repo_task

ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]
STALE = "0123456789abcdef" * 4
DIGEST = "ab" * 32

# (name, lines of the `suite` entry, how `file` is written); the name says flow or block
FORMS = [
    ("flow-single-quotes", ["suite: {file: suite/tasks.jsonl, sha256: ''}"], "suite/tasks.jsonl"),
    ("flow-double-quotes", ['suite: {file: suite/tasks.jsonl, sha256: ""}'], "suite/tasks.jsonl"),
    ("flow-no-key", ["suite: {file: suite/tasks.jsonl}"], "suite/tasks.jsonl"),
    (
        "flow-quoted-file",
        ["suite: {file: 'suite/tasks.jsonl', sha256: ''}"],
        "'suite/tasks.jsonl'",
    ),
    ("flow-quoted-file-no-key", ['suite: {file: "suite/tasks.jsonl"}'], '"suite/tasks.jsonl"'),
    ("flow-stale", [f"suite: {{file: suite/tasks.jsonl, sha256: {STALE}}}"], "suite/tasks.jsonl"),
    (
        "block-single-quotes",
        ["suite:", "  file: suite/tasks.jsonl", "  sha256: ''"],
        "suite/tasks.jsonl",
    ),
    ("block-no-key", ["suite:", "  file: suite/tasks.jsonl"], "suite/tasks.jsonl"),
    (
        "block-quoted-file",
        ["suite:", '  file: "suite/tasks.jsonl"', '  sha256: ""'],
        '"suite/tasks.jsonl"',
    ),
    ("block-quoted-file-no-key", ["suite:", "  file: 'suite/tasks.jsonl'"], "'suite/tasks.jsonl'"),
    (
        "block-stale",
        ["suite:", "  file: suite/tasks.jsonl", f'  sha256: "{STALE}"'],
        "suite/tasks.jsonl",
    ),
]

# The rest of the controls; `{suite}` is replaced by the suite lines.
BODY = """\
protocol_id: test
channel: exploratory
{suite}
runtime:
  timeout_s: 60
  verify_timeout_s: 60
tools:
  allowlist: []
  forbidden_paths: ['.git/']
arms:
  - name: c
    control: true
    agent: {{type: scripted, action: noop}}
"""

COMMENTED_BODY = """\
# Controls for the sealing tests.
protocol_id: test  # the protocol
channel: "exploratory"
# The suite, pinned by `deltarun seal`:
{suite}
# Below the suite.

runtime:
  timeout_s: 60      # seconds
  verify_timeout_s: 60
tools:
  allowlist: []
  forbidden_paths: ['.git/']  # quoted on purpose
arms:
  - name: c  # the control arm
    control: true
    agent: {{type: scripted, action: noop}}
# End of file.
"""

# The same, with the suite as the last entry and followed only by comments.
SUITE_LAST_BODY = """\
# Controls for the sealing tests.
protocol_id: test
channel: exploratory
runtime: {{timeout_s: 60, verify_timeout_s: 60}}
tools:
    allowlist: []
    forbidden_paths: [.git/]
arms:
-   name: c
    control: true
    agent: {{type: scripted, action: noop}}
{suite}
# Trailing comment.

# Another one.
"""

LAYOUTS = {"plain": BODY, "commented": COMMENTED_BODY, "suite-last": SUITE_LAST_BODY}


def controls_text(layout: str, suite_lines: list[str]) -> str:
    if layout != "plain":
        suite_lines = [f"{line}  # beside {index}" for index, line in enumerate(suite_lines)]
    if layout == "suite-last":
        suite_lines = [
            line.replace("  ", "    ", 1) if line[0] == " " else line for line in suite_lines
        ]
    return LAYOUTS[layout].format(suite="\n".join(suite_lines))


def comments(text: str) -> list[str]:
    """Every comment in document order (these texts have no '#' inside values)."""
    return [line[line.index("#") :] for line in text.splitlines() if "#" in line]


def write_controls(root: Path, text: str) -> Path:
    make_suite(root, [repo_task("t1")], ARMS, seal=False)
    path = root / "controls.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(("form", "suite_lines", "file_token"), FORMS, ids=[f[0] for f in FORMS])
def test_seal_pins_every_form_and_keeps_the_rest(
    tmp_path: Path, layout: str, form: str, suite_lines: list[str], file_token: str
) -> None:
    original = controls_text(layout, suite_lines)
    path = write_controls(tmp_path, original)

    digest, written = seal_target(path, load_controls)

    tasks = tmp_path / "suite" / "tasks.jsonl"
    assert written == [tasks.resolve(), path]
    assert digest == sha256_file(tasks) and digest != STALE
    sealed = path.read_text(encoding="utf-8")
    # (a) the real loader reads the pin back, as exactly the digest.
    assert load_controls(path).controls.suite.sha256 == digest
    # (b) every comment, full-line and end-of-line, is still there and in order.
    assert comments(sealed) == comments(original)
    # (c) every line without the pin is unchanged (a flow suite line gains the pin).
    flow = form.startswith("flow")
    kept = [line for line in original.splitlines() if "sha256" not in line]
    if flow:
        kept = [line for line in kept if not line.startswith("suite:")]
    assert [line for line in sealed.splitlines() if "sha256" not in line] == kept
    # The pin is a plain digest in the place the form asks for, with `file` as written.
    pin_lines = [line for line in sealed.splitlines() if "sha256" in line]
    assert len(pin_lines) == 1
    had_key = any("sha256" in line for line in suite_lines)
    if flow:
        beside = " +# beside 0" if layout != "plain" else ""
        expected = rf"suite: \{{file: {re.escape(file_token)}, sha256: {digest}\}}{beside}"
    else:
        beside = " +# beside 2" if layout != "plain" and had_key else ""
        lines = sealed.splitlines()
        file_line = lines[lines.index(pin_lines[0]) - 1]
        assert file_line.lstrip().startswith(f"file: {file_token}")
        indent = file_line[: len(file_line) - len(file_line.lstrip())]
        expected = rf"{indent}sha256: {digest}{beside}"
    assert re.fullmatch(expected, pin_lines[0]), pin_lines[0]
    assert sealed.endswith("\n") and not sealed.endswith("\n\n")
    # (d) sealing again leaves the file alone: same bytes, not even rewritten.
    before = path.stat()
    assert seal_target(path, load_controls) == (digest, written)
    assert path.read_text(encoding="utf-8") == sealed
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize(("form", "suite_lines", "file_token"), FORMS, ids=[f[0] for f in FORMS])
def test_cli_seal_then_load_end_to_end(
    tmp_path: Path, form: str, suite_lines: list[str], file_token: str
) -> None:
    path = write_controls(tmp_path, controls_text("commented", suite_lines))

    result = run_cli("seal", str(path))

    assert result.returncode == 0, result.stderr
    digest = result.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", digest), result.stdout
    assert f"wrote {path}" in result.stderr.replace("\n", "")
    loaded = load_controls(path)
    assert loaded.controls.suite.sha256 == digest
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    assert suite.sha256 == digest and [t.id for t in suite.tasks] == ["t1"]


@pytest.mark.parametrize(
    "suite_lines",
    [
        ["suite: {file: suite/tasks.jsonl, sha256: ''}"],
        ["suite: {file: suite/tasks.jsonl, sha256: ''}  # pinned"],
        ["suite:", "  file: suite/tasks.jsonl", "  sha256: ''"],
        ["suite:", "  file: suite/tasks.jsonl", "  sha256: ''  # pinned"],
    ],
)
def test_empty_single_quoted_pin_gets_no_stray_quotes(
    tmp_path: Path, suite_lines: list[str]
) -> None:
    """The old bug: `sha256: ''` became `sha256: <digest>''` and the next run failed."""
    path = write_controls(tmp_path, BODY.format(suite="\n".join(suite_lines)))

    digest, _ = seal_target(path, load_controls)

    sealed = path.read_text(encoding="utf-8")
    assert f"{digest}''" not in sealed and "''" not in sealed
    assert re.search(rf"sha256: {digest}(\}}|\s|$)", sealed), sealed
    loaded = load_controls(path)
    assert loaded.controls.suite.sha256 == digest
    load_suite(loaded.suite_path, loaded.controls.suite.sha256)  # no DigestMismatch


def test_seal_writes_digests_and_pins_controls(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, seal=False)

    digest, written = seal_target(controls, load_controls)

    tasks_path = tmp_path / "suite" / "tasks.jsonl"
    assert written == [tasks_path, controls]
    assert sha256_file(tasks_path) == digest
    line = json.loads(tasks_path.read_text())
    assert line["repo_sha256"] == sha256_file(tmp_path / "suite" / "fixtures" / "t1.tar")
    assert f"sha256: {digest}\n" in controls.read_text()
    suite = load_suite(tasks_path, digest)
    assert [t.id for t in suite.tasks] == ["t1"]
    assert seal(tasks_path) == digest  # sealing twice changes nothing


def test_seal_directory_and_tasks_file_do_not_touch_controls(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, seal=False)
    before = controls.read_bytes()
    tasks = tmp_path / "suite" / "tasks.jsonl"

    assert seal_target(tmp_path / "suite", load_controls) == (seal(tasks), [tasks])
    assert seal_target(tasks, load_controls) == (seal(tasks), [tasks])
    assert controls.read_bytes() == before
    with pytest.raises(UserError, match=r"nothing: not found; pass a suite directory"):
        seal_target(tmp_path / "nothing", load_controls)


def test_pin_flow_and_block_forms() -> None:
    flow = 'protocol_id: x\nsuite: {file: s/tasks.jsonl, sha256: ""}  # pinned\narms: []\n'
    assert pin_suite_digest(flow, DIGEST) == (
        f"protocol_id: x\nsuite: {{file: s/tasks.jsonl, sha256: {DIGEST}}} # pinned\narms: []\n"
    )
    block = "suite:\n  file: s/tasks.jsonl\n  sha256: ''\narms: []\n"
    assert pin_suite_digest(block, DIGEST) == (
        f"suite:\n  file: s/tasks.jsonl\n  sha256: {DIGEST}\narms: []\n"
    )
    assert pin_suite_digest("suite: {file: x}\n", DIGEST) == (
        f"suite: {{file: x, sha256: {DIGEST}}}\n"
    )


def test_pin_adds_the_key_after_file_above_the_comments_that_follow() -> None:
    text = "suite:\n  file: x  # the file\n# about runtime\n\nruntime:\n  timeout_s: 1\n"
    assert pin_suite_digest(text, DIGEST) == (
        f"suite:\n  file: x  # the file\n  sha256: {DIGEST}\n# about runtime\n\n"
        "runtime:\n  timeout_s: 1\n"
    )


def test_pin_already_right_returns_the_same_text() -> None:
    for text in (
        f"suite: {{file: x, sha256: {DIGEST}}}  #  odd   spacing\nnothing: ~\n",
        f'suite:\n    file: x\n    sha256: "{DIGEST}"\r\nflag: True',
    ):
        assert pin_suite_digest(text, DIGEST) is text


def test_pin_keeps_indentation_and_sequence_style() -> None:
    text = (
        "suite:\n    file: x\n    sha256: ''\n"
        "tools:\n    allowlist:\n      - a\n      - b\n"
        "arms:\n  - name: c\n    control: true\n"
    )
    assert pin_suite_digest(text, DIGEST) == text.replace("''", DIGEST)


def test_pin_keeps_line_endings_final_newline_and_preamble() -> None:
    crlf = "# c\r\nsuite:\r\n  file: x\r\n  sha256: ''\r\narms: []\r\n"
    assert pin_suite_digest(crlf, DIGEST) == crlf.replace("''", DIGEST)
    no_newline = "suite:\n  file: x\n  sha256: ''"
    assert pin_suite_digest(no_newline, DIGEST) == f"suite:\n  file: x\n  sha256: {DIGEST}"
    preamble = "# head\n%YAML 1.1\n---  # start\n# body\nsuite: {file: x, sha256: ''}\n"
    assert pin_suite_digest(preamble, DIGEST) == preamble.replace("''", DIGEST)


def test_pin_invalid_yaml_is_the_loaders_one_line_error() -> None:
    text = "protocol_id: x\nsuite: {file: x\n"
    with pytest.raises(UserError) as loader:
        parse_controls(text, "c.yaml")
    with pytest.raises(UserError) as pinned:
        pin_suite_digest(text, DIGEST, "c.yaml")
    assert str(pinned.value) == str(loader.value)
    assert str(pinned.value).startswith("c.yaml: line ") and "\n" not in str(pinned.value)


def test_pin_errors_name_the_file_in_one_line() -> None:
    with pytest.raises(UserError, match=r"^c\.yaml: suite: cannot find where to write"):
        pin_suite_digest("protocol_id: x\n", DIGEST, "c.yaml")
    with pytest.raises(UserError, match=r"^c\.yaml: line 2: duplicate key"):
        pin_suite_digest("suite: {file: x}\nsuite: {file: y}\n", DIGEST, "c.yaml")
    # ruamel cannot keep a comment inside a multi-line flow mapping: refuse, do not drop it.
    with pytest.raises(UserError, match=rf"^c\.yaml: suite\.sha256: .*'sha256: {DIGEST}'"):
        pin_suite_digest("suite: {  # keep me\n  file: x}\n", DIGEST, "c.yaml")


def test_failed_write_leaves_the_controls_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_controls(tmp_path, BODY.format(suite="suite: {file: suite/tasks.jsonl}"))
    before = path.read_bytes()
    seal(tmp_path / "suite" / "tasks.jsonl")  # so only the controls file is left to write

    def refuse(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(UserError, match=r"controls\.yaml: cannot write the controls file"):
        seal_target(path, load_controls)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["controls.yaml", "suite"]
