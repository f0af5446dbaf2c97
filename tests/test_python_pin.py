"""``runtime.python``: every image a run uses is asked its own Python before the run; a
mismatch is one line naming the image, the pin and the version found, exit 3, and nothing
is written. Unset, it is left out of the protocol hash (older runs keep theirs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.config.loader import parse_controls, protocol_hash
from runner.sandbox.python_version import matches
from tests.conftest import run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task

ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]


def test_a_pin_names_a_minor_or_an_exact_version() -> None:
    assert matches("3.11", "3.11.2") and matches("3.11.2", "3.11.2")
    assert not matches("3.11", "3.1.11") and not matches("3.11.3", "3.11.2")


def test_unset_it_leaves_the_protocol_hash_alone() -> None:
    base = "protocol_id: p\nsuite: {file: t}\narms:\n  - {name: c, control: true, agent: {type: scripted, action: noop}}\n"
    unset = protocol_hash(parse_controls(base, "c"), {})
    pinned = base.replace("protocol_id: p", "protocol_id: p\nruntime: {python: '3.11'}")
    assert protocol_hash(parse_controls(pinned, "c"), {}) != unset
    with pytest.raises(Exception, match="python"):
        parse_controls(base.replace("protocol_id: p", "protocol_id: p\nruntime: {python: 3}"), "c")


@pytest.mark.docker
def test_the_images_python_is_checked_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text(ADD_GOLD)
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, runtime={"python": "3.11"})
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "ok"))
    assert ran.returncode == 0, ran.stderr
    data = yaml.safe_load(controls.read_text())
    data["runtime"]["python"] = "3.9"
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    refused = run_cli("run", str(controls), "--out", str(tmp_path / "no"))
    assert refused.returncode == 3, refused.stderr
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "runtime.python pins 3.9, image deltarun/sandbox-python:bookworm" in line
    assert "has Python 3.11." in line
    assert not (tmp_path / "no").exists()
