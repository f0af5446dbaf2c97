"""An image's facts are probed once per machine (``runner.grading.image_facts``): a second
process reads the answer kept in the deltarun cache instead of opening a sandbox; a kept
answer that fails the checks a fresh one passes is probed again and replaced; another
version of the probe script never reads this one's answer; a cache that cannot be written
costs a probe, never the trial; trials asking at once, in threads or processes, wait
for one probe."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


class SlowProbes(FakeSandboxFactory):
    """A factory whose sandboxes take a moment to open, as a real probe's does: room for
    every caller to arrive while the first probe is under way."""

    def open(self, spec: SandboxSpec) -> Any:
        time.sleep(0.3)
        return super().open(spec)


def test_trials_asking_at_once_wait_for_one_probe(cache: Path) -> None:
    """Eight threads of one process (a local pool's trials) ask for a new image's facts at
    the same moment: one sandbox is opened, and all eight get its answer."""
    factory = SlowProbes(image_digest=f"sha256:{uuid.uuid4().hex}", modules=("calc",))
    start = threading.Barrier(8)

    def ask(_: int) -> ImageFacts:
        start.wait()
        return image_facts(factory, SPEC, factory.image_digest)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(8)))
    assert len(factory.opened) == 1
    assert all(a.modules == {"calc"} for a in answers)


def _probe_in_a_new_process(digest: str, count: str, start: Any) -> None:
    """Another process of the machine (a worker's pool process): nothing known in memory,
    the same cache; each sandbox it opens is counted in the file ``count``."""
    new_process()
    factory = SlowProbes(image_digest=digest, modules=("calc",))
    start.wait()
    found = image_facts(factory, SPEC, digest)
    with open(count, "a") as out:
        out.write(f"{len(factory.opened)} {sorted(found.modules)}\n")


def test_processes_asking_at_once_wait_for_one_probe(cache: Path, tmp_path: Path) -> None:
    """Four processes sharing the cache ask for a new image's facts at the same moment: one
    of them probes, the other three read its kept answer."""
    digest, count = f"sha256:{uuid.uuid4().hex}", str(tmp_path / "count")
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)
    processes = [
        context.Process(target=_probe_in_a_new_process, args=(digest, count, start))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    lines = Path(count).read_text().splitlines()
    assert sorted(lines) == ["0 ['calc']"] * 3 + ["1 ['calc']"], lines
    assert [p.name for p in (cache / "facts").iterdir() if p.suffix == ".json"] == [
        kept_files(cache)[0].name
    ]


def test_no_two_keys_share_a_kept_answer(cache: Path) -> None:
    from runner.trees.kept import kept_path

    keys = [("a\nb",), ("a", "b"), ("a", "b", ""), ("a\\nb",), ('["a", "b"]',), ("a\udcff",)]
    paths = [kept_path(*key) for key in keys]
    assert len(set(paths)) == len(keys)
    assert all(path.parent == cache / "facts" for path in paths)
    assert kept_path("a", "b") == paths[1]  # the same question, the same place
