"""Environment images built from the suite: context digest, pins, `deltarun build`, contract.

The pure parts (digest, pin rewrite, the check of seal and load_suite, reuse decisions)
are tested without Docker; builds, the sandbox contract, a run and prepare's image check
use the real engine. Every environment a test builds has a name of its own (a nonce),
so parallel sessions never share a tag, and each test removes the images it made.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from runner.config.runtime import Runtime
from runner.errors import DigestMismatch, UserError
from runner.hashing import sha256_file
from runner.records import environment_tag
from runner.sandbox.images import BuildRequest, ImageInfo
from runner.suite.build import build, on_base
from runner.suite.environments import (
    CONTEXT_LABEL,
    Pin,
    check_contexts,
    context_digest,
    context_entries,
    environments_of,
    pin_lines,
    write_context_tar,
)
from runner.suite.load import read_tasks
from runner.trees.archives import members_from_dir, tree_digest
from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_HIDDEN, PY_IMAGE, make_suite, repo_task, write_tar

CONTROL = {"name": "control", "control": True, "agent": {"type": "scripted", "action": "noop"}}
GOLD = {"name": "gold", "agent": {"type": "patch", "dir": "patches/gold"}}
TINY = "ARG BASE\nFROM ${BASE}\nCOPY marker.txt /opt/marker.txt\n"


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def env_task(task_id: str, environment: str) -> dict[str, Any]:
    task = repo_task(task_id)
    del task["image"]
    return {**task, "environment": environment}


def write_env(suite: Path, name: str, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    root = suite / "environments" / name
    root.mkdir(parents=True, exist_ok=True)
    (root / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (root / rel).write_text(text)
    return root


def tiny_suite(tmp: Path, name: str, dockerfile: str = TINY, **kwargs: Any) -> Path:
    """A one-task suite (calc fixture) whose task runs in environment ``name``; unsealed."""
    controls = make_suite(tmp, [env_task("t1", name)], [CONTROL], seal=False, **kwargs)
    write_env(tmp / "suite", name, dockerfile, {"marker.txt": f"{uuid.uuid4()}\n"})
    return controls


# --- pure parts, no Docker -------------------------------------------------------------


def test_context_digest_is_the_agent_directory_digest(tmp_path: Path) -> None:
    root = tmp_path / "ctx"
    (root / "wheels").mkdir(parents=True)
    (root / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    (root / "wheels" / "a.whl").write_bytes(b"PK\x03\x04")
    (root / "install.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "install.sh", 0o755)
    digest = context_digest(context_entries(root))
    assert digest == tree_digest(members_from_dir(root))

    os.chmod(root / "install.sh", 0o644)  # the executable bit counts
    no_exec = context_digest(context_entries(root))
    assert no_exec != digest
    (root / "wheels" / "a.whl").write_bytes(b"PK\x03\x05")  # so does every byte
    assert context_digest(context_entries(root)) not in (digest, no_exec)
    (root / "wheels" / "a.whl").rename(root / "wheels" / "b.whl")  # and every name
    assert len({digest, no_exec, context_digest(context_entries(root))}) == 3


def test_context_refuses_links_and_special_files(tmp_path: Path) -> None:
    root = tmp_path / "ctx"
    root.mkdir()
    (root / "Dockerfile").write_text("FROM x\n")
    (root / "link").symlink_to("Dockerfile")
    with pytest.raises(UserError, match="symbolic link") as info:
        context_entries(root)
    assert str(root / "link") in str(info.value) and "\n" not in str(info.value)
    (root / "link").unlink()
    os.mkfifo(root / "pipe")
    with pytest.raises(UserError, match="special file"):
        context_entries(root)


def test_context_tar_holds_exactly_the_digested_entries(tmp_path: Path) -> None:
    import io
    import tarfile

    root = tmp_path / "ctx"
    (root / "sub").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM x\n")
    (root / "sub" / "run.sh").write_text("echo\n")
    os.chmod(root / "sub" / "run.sh", 0o755)
    buffer = io.BytesIO()
    write_context_tar(context_entries(root), buffer)
    with tarfile.open(fileobj=io.BytesIO(buffer.getvalue())) as archive:
        seen = {m.name: (m.type, m.mode, m.mtime, m.uid) for m in archive.getmembers()}
    assert seen == {
        "Dockerfile": (tarfile.REGTYPE, 0o644, 0, 0),
        "sub": (tarfile.DIRTYPE, 0o755, 0, 0),
        "sub/run.sh": (tarfile.REGTYPE, 0o755, 0, 0),
    }


def test_pin_lines_rewrites_only_the_environment_tasks() -> None:
    plain = json.dumps(repo_task("a"), indent=None)  # not canonical: must stay byte for byte
    env = json.dumps({**env_task("b", "web"), "zz": 1})
    pins = {"web": Pin("ab" * 32, "sha256:" + "cd" * 32)}
    out = pin_lines([plain, env], pins)
    assert out[0] == plain
    data = json.loads(out[1])
    assert data["environment_sha256"] == "ab" * 32
    assert data["environment_image"] == "sha256:" + "cd" * 32
    assert out[1] == json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert pin_lines(out, pins) == out  # pinned lines are kept as they are


def _write_tasks(suite: Path, tasks: list[dict[str, Any]]) -> Path:
    """tasks.jsonl with a blank line after each task, and the calc archives it names."""
    for task in tasks:
        write_tar(suite / task["repo"], ADD_FIXTURE)
        write_tar(suite / task["hidden"], ADD_HIDDEN)
    path = suite / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n\n" for t in tasks))  # blank lines between
    return path


def test_check_contexts_names_the_line_the_task_and_the_fix(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    plain = repo_task("plain")
    path = _write_tasks(suite, [plain, env_task("t2", "web")])
    with pytest.raises(UserError, match=r"tasks\.jsonl:3: task 't2': environment 'web'") as info:
        check_contexts(path, read_tasks(path))
    assert "environments/web" in str(info.value) and "Dockerfile" in str(info.value)

    root = write_env(suite, "web", "ARG BASE\nFROM ${BASE}\n")
    (root / "Dockerfile").unlink()
    with pytest.raises(UserError, match="environments/web/Dockerfile not found"):
        check_contexts(path, read_tasks(path))
    (root / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    with pytest.raises(UserError, match=r"tasks\.jsonl:3: .*not built; run `deltarun build`"):
        check_contexts(path, read_tasks(path))

    digest = context_digest(context_entries(root))
    pinned = {**env_task("t2", "web"), "environment_sha256": digest}
    pinned["environment_image"] = "sha256:" + "0" * 64
    path = _write_tasks(suite, [plain, pinned])
    check_contexts(path, read_tasks(path))  # pinned and unchanged: passes
    (root / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nRUN true\n")
    with pytest.raises(DigestMismatch) as mismatch:
        check_contexts(path, read_tasks(path))
    message = str(mismatch.value)
    assert digest in message and context_digest(context_entries(root)) in message
    assert "'web'" in message and "deltarun build" in message and "\n" not in message
    assert mismatch.value.exit_code == 3


def test_unbuilt_environment_is_one_line_from_seal_and_run(tmp_path: Path) -> None:
    controls = tiny_suite(tmp_path, "web")
    assert_one_line(run_cli("seal", str(controls)), 1, "tasks.jsonl:1", "'web'", "deltarun build")
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "'web'", "not built")
    assert not (tmp_path / "run").exists()


def test_on_base() -> None:
    assert on_base(["a", "b", "c"], ["a", "b"])
    assert on_base(["a", "b"], ["a", "b"])
    assert not on_base(["a"], ["a", "b"])
    assert not on_base(["x", "a", "b"], ["a", "b"])


class FakeBuilder:
    """An engine in memory: records builds, tags and removals; images by ID."""

    def __init__(self, base_layers: tuple[str, ...], *, contract: str | None = None) -> None:
        self.images = {PY_IMAGE: ImageInfo("sha256:" + "b" * 64, base_layers)}
        self.builds: list[BuildRequest] = []
        self.removed: list[str] = []
        self.contract = contract

    def inspect(self, image: str) -> ImageInfo | None:
        return self.images.get(image)

    def build(self, context: IO[bytes], request: BuildRequest, log: Callable[[str], None]) -> str:
        self.builds.append(request)
        base = self.images[PY_IMAGE]
        image = f"sha256:{len(self.builds):064x}"
        self.images[image] = ImageInfo(image, (*base.layers, "env"), dict(request.labels))
        return image

    def preflight(self, image: str, runtime: Runtime) -> None:
        if self.contract is not None:
            raise UserError(self.contract)

    def tag(self, image: str, tag: str) -> None:
        self.images[tag] = self.images[image]

    def remove(self, image: str) -> None:
        self.removed.append(image)


def test_build_reuses_only_an_image_of_the_same_context_on_the_same_base(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite"
    path = _write_tasks(suite, [env_task("t1", "web")])
    root = write_env(suite, "web", TINY, {"marker.txt": "x\n"})
    builder = FakeBuilder(("l1",))
    first = build(suite, builder, network="none").built
    assert [b.reused for b in first] == [False]
    assert builder.builds[0].buildargs == {"BASE": "sha256:" + "b" * 64}
    assert builder.builds[0].network == "none"
    assert builder.builds[0].labels[CONTEXT_LABEL] == context_digest(context_entries(root))
    assert [b.reused for b in build(suite, builder).built] == [True]
    assert [b.reused for b in build(suite, builder, rebuild=True).built] == [False]
    assert builder.builds[-1].nocache

    builder.images[PY_IMAGE] = ImageInfo("sha256:" + "c" * 64, ("l2",))  # a new base
    again = build(suite, builder).built
    assert not again[0].reused and len(builder.builds) == 3
    assert json.loads(path.read_text())["environment_image"] == again[0].image_id

    (root / "marker.txt").write_text("y\n")  # another context: another tag
    changed = build(suite, builder).built[0]
    assert changed.tag == environment_tag("web", context_digest(context_entries(root)))
    assert changed.tag != again[0].tag and not changed.reused


def test_build_that_breaks_the_contract_is_removed_and_not_pinned(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    path = _write_tasks(suite, [env_task("t1", "web")])
    write_env(suite, "web", TINY, {"marker.txt": "x\n"})
    before = path.read_bytes()
    builder = FakeBuilder(("l1",), contract="lacks git")
    with pytest.raises(UserError, match="'web': the image breaks the sandbox contract: lacks git"):
        build(suite, builder)
    assert builder.removed == ["sha256:" + f"{1:064x}"]
    assert not any(key.startswith("deltarun-env/") for key in builder.images)
    assert path.read_bytes() == before


def test_environments_of_keeps_first_use_order(tmp_path: Path) -> None:
    path = _write_tasks(
        tmp_path / "suite",
        [env_task("a", "y"), repo_task("b"), env_task("c", "x"), env_task("d", "y")],
    )
    named = environments_of(read_tasks(path))
    assert {name: [t.id for t in tasks] for name, tasks in named.items()} == {
        "y": ["a", "d"],
        "x": ["c"],
    }


# --- the real engine --------------------------------------------------------------------


@pytest.fixture
def env_name(docker_api: Any) -> Iterator[str]:
    """A fresh environment name; every image tagged deltarun-env/<name> is removed after."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    for image in docker_api.images(name=f"deltarun-env/{name}"):
        for tag in image.get("RepoTags") or []:
            if tag.startswith(f"deltarun-env/{name}:"):
                docker_api.remove_image(tag)


def _pins(controls: Path) -> dict[str, Any]:
    return dict(json.loads((controls.parent / "suite" / "tasks.jsonl").read_text()))


def _controls_pin(controls: Path) -> str:
    import yaml

    return str(yaml.safe_load(controls.read_text())["suite"]["sha256"])


@pytest.mark.docker
def test_build_pins_seals_and_then_reuses(tmp_path: Path, env_name: str, docker_api: Any) -> None:
    controls = tiny_suite(tmp_path, env_name)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    result = run_cli("build", str(controls), "--network", "none")
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[0].split()
    task = _pins(controls)
    tag = environment_tag(env_name, task["environment_sha256"])
    image = docker_api.inspect_image(tag)
    assert line[:2] == [env_name, tag] and line[3] == "built"
    assert image["Id"] == task["environment_image"] and line[2] == image["Id"][7:19]
    assert image["Config"]["Labels"][CONTEXT_LABEL] == task["environment_sha256"]
    assert image["Config"]["Labels"]["deltarun.environment"] == env_name
    root = tmp_path / "suite" / "environments" / env_name
    assert task["environment_sha256"] == context_digest(context_entries(root))
    assert _controls_pin(controls) == sha256_file(tasks)  # sealed: run meets no mismatch
    sealed = tasks.read_bytes()

    again = run_cli("build", str(tmp_path / "suite"))  # the suite folder works too
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[3] == "reused"
    assert tasks.read_bytes() == sealed
    assert run_cli("seal", str(controls)).stdout.strip() == sha256_file(tasks)

    (root / "marker.txt").write_text("changed\n")
    line_ = assert_one_line(run_cli("seal", str(controls)), 3, env_name, "deltarun build")
    assert task["environment_sha256"] in line_
    assert_one_line(run_cli("run", str(controls), "--out", str(tmp_path / "r")), 3, env_name)
    assert tasks.read_bytes() == sealed


BROKEN = {
    "not on the base": (
        "ARG BASE\nFROM scratch\nCOPY marker.txt /marker.txt\n",
        ["not built on the sandbox base", "FROM ${BASE}"],
    ),
    "no agent user": (
        "ARG BASE\nFROM ${BASE}\nUSER root\nRUN userdel agent\n",
        ["breaks the sandbox contract", "agent user with uid 1000"],
    ),
    "setuid file": (
        "ARG BASE\nFROM ${BASE}\nUSER root\n"
        "RUN cp /bin/true /usr/local/bin/sneaky && chmod 4755 /usr/local/bin/sneaky\n",
        ["breaks the sandbox contract", "setuid", "/usr/local/bin/sneaky"],
    ),
    "failing step": (
        "ARG BASE\nFROM ${BASE}\nRUN echo about to fail && exit 7\n",
        ["did not build", "about to fail", "non-zero code: 7"],
    ),
}


@pytest.mark.docker
@pytest.mark.parametrize("case", list(BROKEN))
def test_build_refuses_an_image_that_breaks_the_contract(
    tmp_path: Path, env_name: str, docker_api: Any, case: str
) -> None:
    dockerfile, needles = BROKEN[case]
    controls = tiny_suite(tmp_path, env_name, dockerfile)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    before = tasks.read_bytes()
    result = run_cli("build", str(controls), "--network", "none")
    assert_one_line(result, 1, f"'{env_name}'", "Dockerfile", *needles)
    assert tasks.read_bytes() == before  # nothing pinned
    assert not docker_api.images(name=f"deltarun-env/{env_name}")  # nothing tagged
    assert not docker_api.images(filters={"label": f"deltarun.environment={env_name}"})


ENV_FIXTURE = {
    "calc/__init__.py": "from envmark import plus\n\n\ndef add(a, b):\n    return plus(a, -b)\n",
    "README.md": "calc\n",
}
ENV_GOLD = (
    "diff --git a/calc/__init__.py b/calc/__init__.py\n"
    "--- a/calc/__init__.py\n"
    "+++ b/calc/__init__.py\n"
    "@@ -3,3 +3,3 @@\n"
    " \n"
    " def add(a, b):\n"
    "-    return plus(a, -b)\n"
    "+    return plus(a, b)\n"
)
# The environment adds a module the base image lacks, into the system site-packages.
ENVMARK_DOCKERFILE = (
    "ARG BASE\nFROM ${BASE}\nUSER root\nCOPY envmark.py /tmp/envmark.py\n"
    'RUN python3 -c "import os, shutil, site; d = site.getsitepackages()[0]; '
    "os.makedirs(d, exist_ok=True); shutil.move('/tmp/envmark.py', d)\"\nUSER agent\n"
)


def in_env_pin(controls: Path) -> str:
    path = controls.parent / "suite" / "tasks.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return str(next(t for t in lines if t["id"] == "in-env")["environment_sha256"])


@pytest.mark.docker
def test_run_passes_gold_only_in_the_environment(tmp_path: Path, env_name: str) -> None:
    """The same task twice: in the environment, gold passes; in the plain base image (no
    envmark module) it misses. The control misses both."""
    in_env, in_base = env_task("in-env", env_name), repo_task("in-base")
    controls = make_suite(
        tmp_path,
        [in_env, in_base],
        [CONTROL, GOLD],
        fixtures={"in-env": ENV_FIXTURE, "in-base": ENV_FIXTURE},
        seal=False,
    )
    write_env(
        tmp_path / "suite",
        env_name,
        ENVMARK_DOCKERFILE,
        {"envmark.py": f"# {uuid.uuid4()}\ndef plus(a, b):\n    return a + b\n"},
    )
    gold = tmp_path / "patches" / "gold"
    gold.mkdir(parents=True)
    for task_id in ("in-env", "in-base"):
        (gold / f"{task_id}.diff").write_text(ENV_GOLD)
    built = run_cli("build", str(controls), "--network", "none")
    assert built.returncode == 0, built.stderr
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"), "-j", "4")
    assert result.returncode == 0, result.stderr
    trials = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").open()]
    verdicts = {(t["arm"], t["task_id"]): t["outcome"] for t in trials}
    assert verdicts == {
        ("gold", "in-env"): "success",
        ("gold", "in-base"): "miss",
        ("control", "in-env"): "miss",
        ("control", "in-base"): "miss",
    }, [t["reason"] for t in trials]
    base_gold = next(t for t in trials if (t["arm"], t["task_id"]) == ("gold", "in-base"))
    assert "envmark" in base_gold["verify_log"]  # it missed for want of the module
    # A replay kit carries the build context, checked against the task line's pin.
    kit = run_cli("export", str(tmp_path / "run"), "--kit", str(tmp_path / "kit"))
    assert kit.returncode == 0, kit.stderr
    copied = tmp_path / "kit" / "suite" / "environments" / env_name
    assert context_digest(context_entries(copied)) == in_env_pin(controls)


@pytest.mark.docker
def test_prepare_refuses_an_image_replaced_under_the_tag(
    tmp_path: Path, env_name: str, docker_api: Any
) -> None:
    controls = tiny_suite(tmp_path, env_name)
    assert run_cli("build", str(controls), "--network", "none").returncode == 0
    task = _pins(controls)
    repository, _, version = environment_tag(env_name, task["environment_sha256"]).rpartition(":")
    other = docker_api.inspect_image(PY_IMAGE)["Id"]  # any other image under the same tag
    docker_api.tag(other, repository, version, force=True)
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    line = assert_one_line(result, 3, task["environment_image"], other, env_name)
    assert "rebuild" in line
    assert not (tmp_path / "run").exists()
    again = run_cli("build", str(controls), "--network", "none")  # rebuilding repairs it
    assert again.returncode == 0, again.stderr
    assert "built" in again.stdout
    assert run_cli("seal", str(controls)).returncode == 0


def test_a_build_context_is_walked_within_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries and bytes are counted as the walk finds them: a context of millions of files
    or of terabytes is refused, not listed or hashed whole."""
    from runner.suite import environments

    root = tmp_path / "env"
    (root / "sub").mkdir(parents=True)
    for name in ("Dockerfile", "a", "sub/b"):
        (root / name).write_bytes(b"x" * 10)
    assert [e.path for e in environments.context_entries(root)] == [
        "Dockerfile",
        "a",
        "sub",
        "sub/b",
    ]
    monkeypatch.setattr(environments, "CONTEXT_MAX_ENTRIES", 3)
    with pytest.raises(UserError, match="over the caps of 3 entries"):
        environments.context_entries(root)
    monkeypatch.setattr(environments, "CONTEXT_MAX_ENTRIES", 100)
    monkeypatch.setattr(environments, "CONTEXT_MAX_BYTES", 25)
    with pytest.raises(UserError, match="and 25 bytes"):
        environments.context_entries(root)
