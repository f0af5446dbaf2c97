"""The image's own bytecode of what the harness imports, linked into the verify phase's
root-owned pycache prefix (``runner.grading.image_facts``, ``image_modules.py``): the
harness's test session reads it instead of compiling pytest and the standard library
again in every trial, and nothing the code under test could write is ever linked."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.grading.image_facts import MAX_LINKS, parse_bytecode
from runner.grading.verify import VerifySettings, linked_bytecode
from runner.records import Outcome, RepoTask
from runner.sandbox.base import ROOT_USER, ExecRequest, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox_scripts import image_modules
from runner.trees.archives import single_file_tar
from tests.helpers import PY_IMAGE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

SCRIPTS = Path(image_modules.__file__).parent
# The scripts that run under the pycache prefix (the collector and guard run with -I -S).
UNDER_PREFIX = (
    "run_pytest.py", "run_unittest.py", "run_sympy.py", "deltarun_channel.py", "deltarun_results.py",
)  # fmt: skip
OWN = {"deltarun_channel", "deltarun_results", "pytest", "sympy", "__future__"}  # not stdlib

GOOD = ["usr/lib/python3.11/json/__init__.cpython-311.pyc", "/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc"]  # fmt: skip


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_every_standard_module_the_harness_imports_is_in_the_probes_session() -> None:
    for name in UNDER_PREFIX:
        missing = _imports(SCRIPTS / name) - OWN - set(image_modules.HARNESS_IMPORTS)
        assert not missing, f"{name} imports {sorted(missing)}: add them to HARNESS_IMPORTS"
        assert _imports(SCRIPTS / name) - OWN <= set(sys.stdlib_module_names), name


def test_a_well_formed_list_is_kept() -> None:
    assert parse_bytecode([GOOD]) == (tuple(GOOD),)
    assert parse_bytecode([]) == ()


@pytest.mark.parametrize(
    "pair",
    [
        ["../usr/lib/x.cpython-311.pyc", GOOD[1]],
        ["/usr/lib/x.cpython-311.pyc", GOOD[1]],
        ["usr/lib/../x.cpython-311.pyc", GOOD[1]],
        ["usr/lib//x.cpython-311.pyc", GOOD[1]],
        ["usr/lib/x.py", GOOD[1]],
        ["usr/lib/x\n.pyc", GOOD[1]],
        ["workspace/calc/__init__.cpython-311.pyc", GOOD[1]],
        [GOOD[0], "usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc"],
        [GOOD[0], "/usr/lib/python3.11/json/__init__.cpython-311.pyc"],
        [GOOD[0], "/workspace/calc/__pycache__/__init__.cpython-311.pyc"],
        [GOOD[0], "/usr/lib/python3.11/__pycache__/../../../tmp/x.pyc"],
        [GOOD[0], "/usr/lib/python3.11/json/__pycache__/__init__.so"],
        [GOOD[0]],
        [GOOD[0], 7],
    ],
)
def test_a_link_out_of_place_refuses_the_whole_list(pair: list[Any]) -> None:
    assert parse_bytecode([GOOD, pair]) is None


def test_more_links_than_the_cap_or_not_a_list_is_refused() -> None:
    assert parse_bytecode([GOOD] * (MAX_LINKS + 1)) is None
    assert parse_bytecode({"a": GOOD}) is None
    assert parse_bytecode(None) is None


# Run as root inside a sandbox (no capability: root writes only where it owns the folder):
# the probe's rule on the image's bytecode and on files made there.
OWNERSHIP = r"""
import json, os, sys
sys.path.insert(0, "/io")
from image_modules import _only_root_writes
import json as probe
os.makedirs("/io/root/open")
os.chmod("/io/root/open", 0o775)  # group-writable
os.makedirs("/tmp/root")
for path in ("/io/root/open/x.pyc", "/tmp/root/x.pyc"):
    open(path, "wb").close()
paths = [probe.__cached__, "/io/root/open/x.pyc", "/tmp/root/x.pyc", "/workspace/mine/x.pyc"]
print(json.dumps([_only_root_writes(p, {}) for p in paths]))
"""


@pytest.mark.docker
def test_only_files_root_alone_can_write_from_the_root_down_are_linked(docker_api: Any) -> None:
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=256, workspace_bytes=64 << 20),
        lifetime_s=600,
        labels={"run": "bytecode-test", "job": "x"},
    )
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        script = (SCRIPTS / "image_modules.py").read_bytes()
        sandbox.put_archive("/io", single_file_tar("image_modules.py", script, uid=0, gid=0))
        mine = ["sh", "-c", "mkdir /workspace/mine && touch /workspace/mine/x.pyc"]
        assert sandbox.run(ExecRequest(argv=mine, timeout_s=60)).exit_code == 0  # the test's uid
        result = sandbox.run(
            ExecRequest(argv=["python3", "-I", "-c", OWNERSHIP], user=ROOT_USER, timeout_s=60)
        )
        assert result.exit_code == 0, result.output
        # the image's json; a group-writable folder; under the sticky /tmp; the test uid's
        assert json.loads(result.output) == [True, False, False, False]
        probe = sandbox.run(
            ExecRequest(
                argv=["python3", "-I", "/io/image_modules.py"], user=ROOT_USER, timeout_s=60
            )
        )
    answer = json.loads(probe.output)
    links, install = parse_bytecode(answer["bytecode"]), parse_bytecode(answer["install_bytecode"])
    assert links is not None and install is not None and len(links) > 100
    for module in ("json/__init__", "_pytest/main", "_pytest/python", "pluggy/_manager"):
        assert any(link.endswith(f"/{module}.cpython-311.pyc") for link, _ in links), module
    assert any("/pip/_internal/" in link for link, _ in install)
    assert not {link for link, _ in links} & {link for link, _ in install}


SESSION_LINKS = (("usr/lib/a.cpython-311.pyc", "/usr/lib/__pycache__/a.cpython-311.pyc"),)
INSTALL_LINKS = (("usr/lib/b.cpython-311.pyc", "/usr/lib/__pycache__/b.cpython-311.pyc"),)


@pytest.mark.parametrize(
    ("declared", "install", "linked"),
    [
        (True, False, SESSION_LINKS),
        (True, True, SESSION_LINKS + INSTALL_LINKS),
        (False, False, ()),  # a hidden_test command: whatever it runs, nothing is linked
        (False, True, INSTALL_LINKS),
    ],
)
def test_what_a_verify_phase_links(declared: bool, install: bool, linked: Any) -> None:
    task = RepoTask.model_validate(
        {
            **repo_task("t1", exit_status=not declared),
            "install": ["pip install -e ."] if install else [],
        }
    )
    settings = VerifySettings(60, 1 << 20, 1 << 20, (), SESSION_LINKS, INSTALL_LINKS)
    assert linked_bytecode(task, settings) == linked


# The hidden test, run by the harness's pytest as the test's uid in the verify sandbox.
HIDDEN = """import importlib.util, json, os, sys
import _pytest.main
import pluggy
import pytest
from calc import add


def test_add_with_the_images_bytecode_and_no_way_to_plant_any():
    assert add(2, 3) == 5
    prefix = sys.pycache_prefix
    assert prefix and prefix.startswith("/workspace/.deltarun-"), prefix
    for module in (json, _pytest.main, pluggy):
        cached = importlib.util.cache_from_source(module.__file__)
        assert cached.startswith(prefix + "/") and os.path.islink(cached), cached
        target = os.path.realpath(cached)
        assert "/__pycache__/" in target and os.stat(target).st_uid == 0, target
        with pytest.raises(PermissionError):
            os.unlink(cached)
        with pytest.raises(PermissionError):
            open(target, "ab")
    with pytest.raises(PermissionError):
        open(os.path.join(os.path.dirname(cached), "planted.cpython-311.pyc"), "wb")
    with pytest.raises(PermissionError):
        os.mkdir(os.path.join(prefix, "workspace"))
    # the workspace's own modules have no bytecode there: compiled from their source
    assert not os.path.lexists(importlib.util.cache_from_source("/workspace/calc/__init__.py"))
"""


@pytest.mark.docker
def test_the_harness_session_reads_the_images_bytecode_the_test_uid_cannot_change(
    tmp_path: Path, docker_api: Any
) -> None:
    fixer = write_agent(tmp_path, "fixer", "sed -i 's/a - b/a + b/' calc/__init__.py\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "fixer", "agent": fixer},
        ],
        hidden={"t1": {"tests/test_hidden.py": HIDDEN}},
    )
    trial = run_one(docker_api, controls, "t1", "fixer")
    assert trial.outcome is Outcome.SUCCESS, trial.verify_log[-3000:]
