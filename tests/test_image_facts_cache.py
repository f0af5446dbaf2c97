"""An image's facts are probed once per machine (``runner.grading.image_facts``): a second
process reads the answer kept in the deltarun cache instead of opening a sandbox; a kept
answer that fails the checks a fresh one passes is probed again and replaced; another
version of the probe script never reads this one's answer; a cache that cannot be written
costs a probe, never the trial."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from runner.grading import image_facts as facts_module
from runner.grading.image_facts import ImageFacts, image_facts
from runner.sandbox.base import Limits, SandboxSpec
from runner.sandbox.fake import FakeSandboxFactory

SPEC = SandboxSpec(
    image="deltarun/sandbox-python:bookworm",
    limits=Limits(memory_bytes=256 << 20, nano_cpus=10**9, pids=64, workspace_bytes=16 << 20),
    lifetime_s=60,
    labels={"run": "facts-cache", "job": "probe"},
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DELTARUN_CACHE", str(root))
    return root


def new_process() -> None:
    """What another process starts with: nothing known in memory."""
    facts_module._FACTS.clear()


def fresh(modules: tuple[str, ...] = ("calc", "numpy")) -> FakeSandboxFactory:
    return FakeSandboxFactory(image_digest=f"sha256:{uuid.uuid4().hex}", modules=modules)


def kept_files(cache: Path) -> list[Path]:
    return sorted((cache / "facts").glob("*.json"))


def test_a_second_process_reads_the_kept_answer_and_opens_no_sandbox(cache: Path) -> None:
    first = fresh()
    found = image_facts(first, SPEC, first.image_digest)
    assert len(first.opened) == 1 and found.modules == {"calc", "numpy"}
    assert len(kept_files(cache)) == 1
    new_process()
    # The same image ID: the kept answer, even though this factory would list other names.
    second = FakeSandboxFactory(image_digest=first.image_digest, modules=("other",))
    again = image_facts(second, SPEC, second.image_digest)
    assert second.opened == [] and again == found
    # Another image ID is probed.
    third = fresh(("third",))
    assert image_facts(third, SPEC, third.image_digest).modules == {"third"}
    assert len(third.opened) == 1 and len(kept_files(cache)) == 2


@pytest.mark.parametrize(
    "kept",
    [
        b"{not json",
        json.dumps({"modules": "calc", "pytest_plugins": []}).encode(),
        json.dumps(
            {
                "modules": ["calc"],
                "pytest_plugins": [],
                "bytecode": [["x.pyc", "/workspace/__pycache__/x.pyc"]],  # a workspace file
                "install_bytecode": [],
            }
        ).encode(),
        b"",
    ],
    ids=["unreadable", "wrong shape", "bytecode in the workspace", "empty"],
)
def test_a_kept_answer_that_fails_the_checks_is_probed_again(cache: Path, kept: bytes) -> None:
    factory = fresh(("calc",))
    image_facts(factory, SPEC, factory.image_digest)
    (path,) = kept_files(cache)
    path.write_bytes(kept)
    new_process()
    factory.modules = ("calc", "again")
    found = image_facts(factory, SPEC, factory.image_digest)
    assert len(factory.opened) == 2 and found.modules == {"calc", "again"}
    new_process()
    assert image_facts(factory, SPEC, factory.image_digest) == found  # replaced: kept again
    assert len(factory.opened) == 2


def test_another_version_of_the_script_keeps_its_own_answer(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory = fresh(("calc",))
    image_facts(factory, SPEC, factory.image_digest)
    new_process()
    script = facts_module.source(facts_module.SCRIPT)
    monkeypatch.setattr(facts_module, "source", lambda name: script + b"\n# changed\n")
    factory.modules = ("calc", "newer")
    assert image_facts(factory, SPEC, factory.image_digest).modules == {"calc", "newer"}
    assert len(factory.opened) == 2 and len(kept_files(cache)) == 2


def test_a_cache_that_cannot_be_written_costs_a_probe_not_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory\n")
    monkeypatch.setenv("DELTARUN_CACHE", str(blocked))
    factory = fresh(("calc",))
    assert image_facts(factory, SPEC, factory.image_digest) == ImageFacts(
        frozenset({"calc"}), (), (), ()
    )
    new_process()
    image_facts(factory, SPEC, factory.image_digest)
    assert len(factory.opened) == 2


def test_an_answer_that_cannot_be_put_in_place_leaves_no_part_file(cache: Path) -> None:
    factory = fresh(("calc",))
    image_facts(factory, SPEC, factory.image_digest)
    (path,) = kept_files(cache)
    path.unlink()
    path.mkdir()  # neither read nor replaced: a directory where the answer goes
    new_process()
    assert image_facts(factory, SPEC, factory.image_digest).modules == {"calc"}
    assert len(factory.opened) == 2
    assert not list((cache / "facts").glob(".part-*"))  # no half-written file left behind
