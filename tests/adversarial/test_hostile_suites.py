"""Hostile suites: a suite is input (DESIGN rule 6). Every path a suite names stays inside
the folder of the file naming it, and deltarun never writes through a link a suite ships.

Each attack is a downloaded package (``tmp_path/pkg``) beside the user's own files
(``tmp_path/outside``, holding a sentinel string), driven through the real command line:
``..`` and absolute paths, links out (a file, a folder part-way, the suite itself) in task
lines, controls, SWE-bench instances, seed kits and run directories, and links where
``seal`` and ``validate`` write. Each must end in exit 2 with one line naming the file, the
field and the path, leave every outside file byte for byte as it was, and leave the
sentinel nowhere (no file under tmp_path, the cache included, nor the output). Every
refusal comes before the first sandbox: the commands run with an unreachable Docker
engine, so none of these tests starts one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.hashing import sha256_file
from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_GOLD, ADD_HIDDEN, make_suite, repo_task, write_tar

SENTINEL = "deltarun-sentinel-" + secrets.token_hex(8)
ARMS: list[dict[str, Any]] = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "patches/gold"}},
]
Held = Callable[[str, str, str], None]


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A clean sealed package (controls.yaml, suite/, patches/gold/) and the user's files
    beside it in ``outside/``: a full suite with its controls, a fixture tar, an agent
    directory, a metrics module, a skill, an environment, empty folders, all holding the
    sentinel (what the old code read, sealed and ran, or wrote through)."""
    out = tmp_path / "outside"
    secret: dict[str, str | bytes] = {**ADD_FIXTURE, **ADD_HIDDEN, "secret.txt": SENTINEL + "\n"}
    write_tar(out / "secret.tar", secret)
    write_tar(out / "fixtures" / "t1.tar", secret)
    (out / "secret.txt").write_text(SENTINEL + "\n")
    (out / "agent").mkdir()
    (out / "agent" / "t1.diff").write_text(f"# {SENTINEL}\n" + ADD_GOLD)
    (out / "metrics.py").write_text(f"# {SENTINEL}\ndef ok(answer, task, wall_s):\n    return 1\n")
    (out / "skill").mkdir()
    (out / "skill" / "SKILL.md").write_text(SENTINEL + "\n")
    (out / "environments" / "env").mkdir(parents=True)
    (out / "environments" / "env" / "Dockerfile").write_text(f"FROM scratch\n# {SENTINEL}\n")
    (out / "repo.bundle").write_text(SENTINEL + "\n")
    (out / "work").mkdir()
    make_suite(out, [{**repo_task("t1"), "prompt": SENTINEL}], ARMS[:1])
    root = tmp_path / "pkg"
    (root / "patches" / "gold").mkdir(parents=True)
    (root / "patches" / "gold" / "t1.diff").write_text(ADD_GOLD)
    make_suite(root, [repo_task("t1")], ARMS)
    return root


def snapshot(tmp_path: Path) -> dict[str, bytes | None]:
    """Every entry under outside/ (a folder as None), by relative path."""
    found: dict[str, bytes | None] = {}
    for path in sorted((tmp_path / "outside").rglob("*")):
        rel = path.relative_to(tmp_path).as_posix()
        found[rel] = None if path.is_dir() else path.read_bytes()
    return found


def sentinel_in(tmp_path: Path) -> list[str]:
    """Files under tmp_path, outside/ aside, that hold the sentinel (links not followed)."""
    hits = []
    for folder, dirs, files in os.walk(tmp_path, followlinks=False):
        dirs[:] = [d for d in dirs if Path(folder, d) != tmp_path / "outside"]
        for name in files:
            path = Path(folder, name)
            small = not path.is_symlink() and path.is_file() and path.stat().st_size < 1 << 26
            if small and SENTINEL.encode() in path.read_bytes():  # not an attack's sparse file
                hits.append(str(path.relative_to(tmp_path)))
    return hits


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command with no reachable Docker engine and a cache under tmp_path."""
    env = {
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
        "DELTARUN_CACHE": str(tmp_path / "cache"),
    }
    return run_cli(*args, env=env, timeout=120)


def refused(
    tmp_path: Path,
    held: Held,
    attack: str,
    tried: str,
    args: list[str],
    *needles: str,
    codes: tuple[int, ...] = (2,),
) -> None:
    """Run ``args`` and hold the property: exit 2 (or one of ``codes``), one line naming
    ``needles``, no traceback, the outside files as they were, the sentinel nowhere."""
    before = snapshot(tmp_path)
    result = cli(tmp_path, *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    said = (lines[0] if lines else "").replace(f"{tmp_path}/", "").removeprefix("deltarun: error: ")
    held(attack, tried, f"exit {result.returncode}: {said}"[:200])
    assert result.returncode in codes, result.stderr
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert snapshot(tmp_path) == before
    assert SENTINEL not in result.stdout + result.stderr
    assert sentinel_in(tmp_path) == []
    assert not (tmp_path / "run").exists()


def edit_task(pkg: Path, **fields: Any) -> None:
    """Rewrite the task line and pin its new digest in the controls (as a hostile author
    would: sealed, so `run` and `validate` get as far as the path)."""
    tasks = pkg / "suite" / "tasks.jsonl"
    line = {**json.loads(tasks.read_text()), **fields}
    tasks.write_text(json.dumps(line) + "\n")
    edit_controls(pkg, lambda c: c["suite"].update(sha256=sha256_file(tasks)))


def edit_controls(pkg: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = pkg / "controls.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def relink(path: Path, target: Path) -> None:
    """Replace ``path`` (a file or a folder of the suite) with a link to ``target``."""
    if path.is_dir():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()
    else:
        path.unlink()
    path.symlink_to(target)


COMMANDS = {
    "seal": lambda pkg, tmp: ["seal", str(pkg / "controls.yaml")],
    "run": lambda pkg, tmp: ["run", str(pkg / "controls.yaml"), "--out", str(tmp / "run")],
    "validate": lambda pkg, tmp: ["validate", str(pkg / "controls.yaml")],
}
BAD = "0" * 64


def _hidden_climbs(pkg: Path, out: Path) -> None:
    edit_task(pkg, hidden="../../outside/secret.tar", hidden_sha256=BAD)


def _repo_absolute(pkg: Path, out: Path) -> None:
    edit_task(pkg, repo=str(out / "secret.tar"), repo_sha256=BAD)


def _fixture_links_out(pkg: Path, out: Path) -> None:
    relink(pkg / "suite" / "fixtures" / "t1.tar", out / "secret.tar")
    edit_task(pkg, repo_sha256=sha256_file(out / "secret.tar"))


def _fixtures_folder_links_out(pkg: Path, out: Path) -> None:
    relink(pkg / "suite" / "fixtures", out / "fixtures")
    edit_task(pkg, repo_sha256=sha256_file(out / "fixtures" / "t1.tar"))


def _git_fixture_climbs(pkg: Path, out: Path) -> None:
    git = {"git": "../../outside/repo.bundle", "commit": "1" * 40}
    edit_task(pkg, repo=git, repo_sha256=BAD, repo_tree="2" * 40)


def _environments_link_out(pkg: Path, out: Path) -> None:
    (pkg / "suite" / "environments").symlink_to(out / "environments")
    pins = {"environment_sha256": BAD, "environment_image": "sha256:" + BAD}
    edit_task(pkg, image=None, environment="env", **pins)


TASK_ATTACKS = {
    "hidden ../": (_hidden_climbs, "hidden", "'../../outside/secret.tar'"),
    "repo absolute": (_repo_absolute, "repo", "/outside/secret.tar"),
    "fixture a link out": (_fixture_links_out, "repo", "'fixtures/t1.tar'"),
    "fixtures/ a link out": (_fixtures_folder_links_out, "repo", "symbolic link"),
    "repo.git ../": (_git_fixture_climbs, "repo.git", "'../../outside/repo.bundle'"),
    "environments/ a link out": (_environments_link_out, "environment", "'environments/env'"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(TASK_ATTACKS))
def test_task_line_paths_stay_in_the_suite(
    tmp_path: Path, pkg: Path, held: Held, attack: str, command: str
) -> None:
    make, field, needle = TASK_ATTACKS[attack]
    make(pkg, tmp_path / "outside")
    args = COMMANDS[command](pkg, tmp_path)
    tried = f"deltarun {command} on a task line whose {field} is {attack}"
    refused(tmp_path, held, f"suite path: {attack}", tried, args, "tasks.jsonl:1", field, needle)


def _suite_file_climbs(pkg: Path, out: Path) -> None:
    edit_controls(pkg, lambda c: c["suite"].update(file="../outside/suite/tasks.jsonl"))


def _suite_file_absolute(pkg: Path, out: Path) -> None:
    edit_controls(pkg, lambda c: c["suite"].update(file=str(out / "suite" / "tasks.jsonl")))


def _suite_folder_links_out(pkg: Path, out: Path) -> None:
    relink(pkg / "suite", out / "suite")
    edit_controls(pkg, lambda c: c["suite"].update(sha256=sha256_file(out / "suite/tasks.jsonl")))


def _agent_dir_climbs(pkg: Path, out: Path) -> None:
    edit_controls(pkg, lambda c: c["arms"][1]["agent"].update(dir="../outside/agent"))


def _agent_dir_links_out(pkg: Path, out: Path) -> None:
    relink(pkg / "patches", out)
    edit_controls(pkg, lambda c: c["arms"][1]["agent"].update(dir="patches/agent"))


def _command_dir_absolute(pkg: Path, out: Path) -> None:
    agent = {"type": "command", "dir": str(out / "agent"), "argv": ["true"]}
    edit_controls(pkg, lambda c: c["arms"][1].update(agent=agent))


def _metrics_climbs(pkg: Path, out: Path) -> None:
    spec = {"module": "../outside/metrics.py", "sha256": sha256_file(out / "metrics.py")}
    edit_controls(pkg, lambda c: c.update(metrics={**spec, "functions": ["ok"]}))


def _on_files_climb(pkg: Path, out: Path) -> None:
    def change(c: dict[str, Any]) -> None:
        c["route"] = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
        c["runtime"]["network"] = "model-only"
        c["arms"][1] = {
            "name": "cc",
            "agent": {"type": "installed", "name": "claude-code", "version": "1.0.0"},
            "baseline": "both",
            "toggles": {"on_files": {"skills/x/SKILL.md": "../outside/skill/SKILL.md"}},
        }

    edit_controls(pkg, change)


CONTROLS_ATTACKS = {
    "suite.file ../": (_suite_file_climbs, "suite.file", "'../outside/suite/tasks.jsonl'"),
    "suite.file absolute": (_suite_file_absolute, "suite.file", "absolute path"),
    "suite/ a link out": (_suite_folder_links_out, "suite.file", "symbolic link"),
    "agent dir ../": (_agent_dir_climbs, "arms[1].agent.dir", "'../outside/agent'"),
    "agent dir through a link": (_agent_dir_links_out, "arms[1].agent.dir", "symbolic link"),
    "command dir absolute": (_command_dir_absolute, "arms[1].agent.dir", "absolute path"),
    "metrics.module ../": (_metrics_climbs, "metrics.module", "'../outside/metrics.py'"),
    "on_files ../": (_on_files_climb, "toggles.on_files.skills/x/SKILL.md", "'../outside/skill"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(CONTROLS_ATTACKS))
def test_controls_paths_stay_beside_the_controls(
    tmp_path: Path, pkg: Path, held: Held, attack: str, command: str
) -> None:
    make, field, needle = CONTROLS_ATTACKS[attack]
    make(pkg, tmp_path / "outside")
    args = COMMANDS[command](pkg, tmp_path)
    tried = f"deltarun {command} on controls whose {field} is {attack}"
    refused(tmp_path, held, f"controls path: {attack}", tried, args, "controls.yaml", field, needle)


WRITES = {
    # (link in the package, its target outside, the command, what the line names)
    "seal: controls.yaml a link": (
        "controls.yaml",
        "controls.yaml",
        ["seal", "{pkg}/controls.yaml"],
        "controls.yaml",
    ),
    "seal SUITE: tasks.jsonl a link": (
        "suite/tasks.jsonl",
        "suite/tasks.jsonl",
        ["seal", "{pkg}/suite"],
        "tasks.jsonl",
    ),
    "seal FILE: tasks.jsonl a link": (
        "suite/tasks.jsonl",
        "suite/tasks.jsonl",
        ["seal", "{pkg}/suite/tasks.jsonl"],
        "tasks.jsonl",
    ),
    "build SUITE: tasks.jsonl a link": (
        "suite/tasks.jsonl",
        "suite/tasks.jsonl",
        ["build", "{pkg}/suite"],
        "tasks.jsonl",
    ),
    "validate: validation.json a link": (
        "suite/validation.json",
        "secret.txt",
        ["validate", "{pkg}/controls.yaml"],
        "validation.json",
    ),
    "validate: its work folder a link": (
        "suite/.deltarun-validate",
        "work",
        ["validate", "{pkg}/controls.yaml"],
        ".deltarun-validate",
    ),
    "validate: its controls a link": (
        "suite/.deltarun-validate/controls.yaml",
        "secret.txt",
        ["validate", "{pkg}/suite"],
        ".deltarun-validate/controls.yaml",
    ),
}


@pytest.mark.parametrize("attack", sorted(WRITES))
def test_deltarun_never_writes_through_a_link_the_suite_ships(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    link, target, args, needle = WRITES[attack]
    where = pkg / link
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.exists():
        where.unlink()
    where.symlink_to(tmp_path / "outside" / target)
    argv = [arg.format(pkg=pkg) for arg in args]
    tried = f"deltarun {' '.join(args)} with {link} a link to outside/{target}"
    refused(tmp_path, held, f"write through a link: {attack}", tried, argv, needle, "symbolic link")


def test_validate_reads_the_gold_beside_the_controls_only_inside(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    """Without a gold arm, `validate` takes gold/ beside the controls (as an import writes
    it): a link there that leads out is a path the package names."""
    edit_controls(pkg, lambda c: c.update(arms=c["arms"][:1]))
    (pkg / "gold").symlink_to(tmp_path / "outside" / "agent")
    tried = "deltarun validate with no gold arm and gold/ a link to a folder outside"
    args = COMMANDS["validate"](pkg, tmp_path)
    refused(tmp_path, held, "suite path: gold/", tried, args, "gold (beside it)", "'gold'")


@pytest.mark.parametrize("command", ["run", "seal"])
def test_validation_json_is_read_only_inside_the_suite(
    tmp_path: Path, pkg: Path, held: Held, command: str
) -> None:
    """validation.json is named by convention, beside tasks.jsonl: a link there is a path
    the suite names like any other (a scored run hashes it, seal pins it)."""
    secret = tmp_path / "outside" / "secret.txt"
    (pkg / "suite" / "validation.json").symlink_to(secret)

    def scored(c: dict[str, Any]) -> None:
        c["channel"] = "scored"
        c["suite"]["validation"] = sha256_file(secret)

    edit_controls(pkg, scored)
    args = COMMANDS[command](pkg, tmp_path)
    tried = f"deltarun {command}, channel scored, suite/validation.json a link out (pinned)"
    field = "suite.validation" if command == "run" else "validation.json"
    refused(tmp_path, held, "suite path: validation.json", tried, args, field, "link")


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ["PATH"]}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return done.stdout.decode().strip()


def _commit(folder: Path, files: dict[str, str], *add: str) -> str:
    """Write ``files`` into ``folder``, make it a git repository committing ``add`` (every
    file when empty); the commit id."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    _git(folder, "init", "-q")
    _git(folder, "add", *(add or ("-A",)))
    _git(folder, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "c")
    return _git(folder, "rev-parse", "HEAD")


TEST_PATCH = (
    "diff --git a/tests/test_hidden.py b/tests/test_hidden.py\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/tests/test_hidden.py\n"
    "@@ -0,0 +1,2 @@\n"
    "+def test_add():\n"
    "+    assert True\n"
)


def _instance(repo: str, base_commit: str = "a" * 40) -> dict[str, Any]:
    return {
        "instance_id": "i1",
        "repo": repo,
        "base_commit": base_commit,
        "patch": ADD_GOLD,
        "test_patch": TEST_PATCH,
        "problem_statement": "Fix add().",
        "FAIL_TO_PASS": ["tests/test_hidden.py::test_add"],
    }


def test_swebench_instance_repo_stays_under_repos(tmp_path: Path, pkg: Path, held: Held) -> None:
    out = tmp_path / "outside"  # the user's own files, a real clone: what repos/../outside is
    commit = _commit(out, ADD_FIXTURE, "secret.txt", *ADD_FIXTURE)
    repos, instances = tmp_path / "repos", pkg / "instances.jsonl"
    repos.mkdir()
    row = _instance("../outside", commit)
    instances.write_text(json.dumps(row) + "\n")
    args = ["import", "swebench", str(instances), "--repos", str(repos), "--out", str(pkg / "swe")]
    tried = "import swebench: an instance's repo is ../outside (owner '..')"
    # Refused as climbing out of --repos (exit 2) or as no owner/name (exit 1): nothing read.
    needles = ("instances.jsonl", "repo", "'../outside'")
    refused(tmp_path, held, "swebench: repo ../", tried, args, *needles, codes=(1, 2))


def test_a_bare_repository_fixture_reads_no_objects_outside(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    """repo.git names a bare repository inside the suite whose objects/info/alternates (and
    a ref) point into the user's own repository outside: git would read that commit."""
    private = tmp_path / "outside" / "private"
    private.mkdir()
    commit = _commit(private, {"secret.txt": SENTINEL + "\n"})
    bare = pkg / "suite" / "repos" / "calc.git"
    bare.parent.mkdir(parents=True)
    _git(bare.parent, "init", "-q", "--bare", "calc.git")
    (bare / "objects" / "info" / "alternates").write_text(f"{private}/.git/objects\n")
    (bare / "refs" / "heads" / "main").write_text(commit + "\n")
    edit_task(pkg, repo={"git": "repos/calc.git", "commit": commit}, repo_sha256="")
    args = COMMANDS["seal"](pkg, tmp_path)
    tried = "deltarun seal: repo.git is a bare repository whose alternates lead outside"
    refused(tmp_path, held, "suite path: git alternates", tried, args, "repo.git", "alternates")


def test_swebench_task_folder_files_stay_in_the_folder(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    clone = pkg / "repos" / "owner__name"  # a real clone: the import would go through
    clone.mkdir(parents=True)
    commit = _commit(clone, ADD_FIXTURE)
    folder = pkg / "dataset" / "tasks" / "i1"
    folder.mkdir(parents=True)
    row = _instance("owner/name", commit)
    spec = {k: v for k, v in row.items() if k not in ("instance_id", "patch")}
    (folder / "task.yaml").write_text(yaml.safe_dump(spec))
    (folder / "gold.patch").symlink_to(tmp_path / "outside" / "secret.txt")
    args = ["import", "swebench", str(pkg / "dataset"), "--repos", str(pkg / "repos")]
    args += ["--out", str(pkg / "swe")]
    tried = "import swebench: tasks/i1/gold.patch is a link to a file outside"
    refused(tmp_path, held, "swebench: layout file a link", tried, args, "gold.patch", "link")


def test_seed004_kit_paths_stay_in_the_kit(tmp_path: Path, held: Held, pkg: Path) -> None:
    from tests.test_seed_import import _line, build_kit

    kit = build_kit(pkg)
    _line('"fixtures/repo-017.tar"', '"../../outside/secret.tar"')(kit)
    args = ["import", "seed004", str(kit), "--out", str(pkg / "out")]
    tried = "import seed004: a task line's repo is ../../outside/secret.tar"
    refused(tmp_path, held, "seed kit: repo ../", tried, args, "tasks.jsonl:1", "repo", "'../..")


def _prepared_run(pkg: Path) -> Path:
    """A run directory as `deltarun run` leaves it before its first trial (no Docker)."""
    from runner.run.prepare import prepare

    run = pkg / "runs" / "r1"
    prepare(pkg / "controls.yaml", run, resume=False, image_digest=lambda _: "sha256:" + BAD)
    return run


@pytest.mark.parametrize("command", ["replay --reverify", "export"])
def test_a_run_directory_names_no_path_out_of_its_controls_folder(
    tmp_path: Path, pkg: Path, held: Held, command: str
) -> None:
    run = _prepared_run(pkg)
    stored = run / "controls.yaml"  # someone else's run directory: its controls are input
    data = yaml.safe_load(stored.read_text())
    data["suite"]["file"] = "../outside/suite/tasks.jsonl"
    stored.write_text(yaml.safe_dump(data, sort_keys=False))
    args = [*command.split(" ", 1)[:1], str(run)]
    args += ["--reverify"] if "reverify" in command else ["--kit", str(tmp_path / "kit")]
    tried = f"deltarun {command} of a run whose stored suite.file is ../outside/suite/tasks.jsonl"
    refused(tmp_path, held, f"run directory: {command}", tried, args, "suite.file", "'../outside")
    assert not (tmp_path / "kit").exists()
