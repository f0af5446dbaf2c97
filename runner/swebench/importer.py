"""``deltarun import swebench``: SWE-bench instances and local clones into a deltarun suite.

For every instance, from the clone of its repository (nothing is fetched):

- the fixture is the git tree at ``base_commit``. The trees travel in one bundle per
  repository, ``repos/<owner>__<name>.bundle``, holding for each tree one commit
  without parents or history (fixed author and date, so the same trees give the
  same bytes): the agent gets the tree, never the project's later history;
- the hidden files are the files ``test_patch`` creates or changes, as they are
  after applying it at ``base_commit`` (``hidden/<id>.tar``); the verify phase puts
  them over whatever the agent left at those paths;
- the declared tests are ``FAIL_TO_PASS`` + ``PASS_TO_PASS``: resolved means every
  one of them ran and passed, as in SWE-bench;
- the prompt is the problem statement (and the hints with ``with_hints``);
- the gold patch is ``gold/<id>.diff``, which ``deltarun validate`` uses.

Each predictions file becomes a patch arm (``predictions/<arm>/<id>.diff``; an
instance the file lacks gets an empty patch, a miss). ``negatives`` adds generated
negative-control tasks. The output is written whole into a new directory; the same
inputs give the same bytes, so the same suite digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.atomic import write_atomic
from runner.errors import UserError
from runner.fixtures.archives import Member, build_tar
from runner.gitpatch import PatchError, touched_paths
from runner.swebench.instances import Instance, instance_of, parse_instances
from runner.swebench.predictions import parse_predictions

SANDBOX_IMAGE = "deltarun/sandbox-python:bookworm"
ARM_RE = re.compile(r"[^A-Za-z0-9._-]+")
# Fixed identity and dates of the fixture commits: the same trees give the same bundle.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "deltarun import",
    "GIT_AUTHOR_EMAIL": "import@deltarun.invalid",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "deltarun import",
    "GIT_COMMITTER_EMAIL": "import@deltarun.invalid",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000",
}
_BASE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "GIT_LITERAL_PATHSPECS": "1",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}
_SETTINGS = ("-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*", "-c", "pack.threads=1")


@dataclass(frozen=True)
class ImportOptions:
    """What ``deltarun import swebench`` was asked to do."""

    instances: Path
    repos: Path
    out: Path
    environment: str | None = None
    dockerfile_template: Path | None = None
    with_hints: bool = False
    negatives: int = 0
    predictions: tuple[tuple[str, Path], ...] = ()  # (arm name, file)
    control: str | None = None  # an arm name, or "empty"; default the first predictions
    timeout_s: float = 1800.0


@dataclass
class Imported:
    """What the import wrote."""

    out: Path
    tasks: int
    negatives: int
    repositories: list[str]
    environments: list[str]
    arms: list[str]
    control: str
    resolved_by_arm: dict[str, int] = field(default_factory=dict)  # instances with a patch


def load_instances(path: Path) -> list[Instance]:
    """Instances from a JSON Lines / JSON array file, or a task-directory layout
    (``tasks/<instance_id>/``: task.yaml, tests.json, problem_statement.md, gold.patch,
    test.patch, optional Dockerfile) given as the folder holding ``tasks/`` or ``tasks/``."""
    if path.is_file():
        return parse_instances(_read_text(path), str(path))
    tasks = path / "tasks" if (path / "tasks").is_dir() else path
    if not path.is_dir():
        raise UserError(f"{path}: not found; pass an instances file (.jsonl/.json) or a folder")
    found = [_layout_instance(folder) for folder in sorted(tasks.iterdir()) if folder.is_dir()]
    if not found:
        raise UserError(f"{tasks}: no task folders (tasks/<instance_id>/task.yaml)")
    return found


def _layout_instance(folder: Path) -> Instance:
    spec_path = folder / "task.yaml"
    if not spec_path.is_file():
        raise UserError(f"{spec_path}: missing; every task folder needs task.yaml")
    try:
        spec = yaml.safe_load(_read_text(spec_path)) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{spec_path}: not valid YAML ({exc})") from exc
    if not isinstance(spec, dict):
        raise UserError(f"{spec_path}: must be a mapping of instance fields")
    row: dict[str, Any] = {"instance_id": folder.name, **spec}
    for name, key in (
        ("problem_statement.md", "problem_statement"),
        ("gold.patch", "patch"),
        ("test.patch", "test_patch"),
    ):
        if (folder / name).is_file():
            row[key] = _read_text(folder / name)
    tests_path = folder / "tests.json"
    if tests_path.is_file():
        try:
            tests = json.loads(_read_text(tests_path))
        except json.JSONDecodeError as exc:
            raise UserError(f"{tests_path}: not valid JSON ({exc.msg})") from exc
        if not isinstance(tests, dict):
            raise UserError(f"{tests_path}: must be an object with FAIL_TO_PASS, PASS_TO_PASS")
        row.update({k: v for k, v in tests.items() if k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
    dockerfile = folder / "Dockerfile"
    text = _read_text(dockerfile) if dockerfile.is_file() else None
    return instance_of(row, str(folder), dockerfile=text)


def import_swebench(options: ImportOptions, say: Callable[[str], None]) -> Imported:
    """Write the suite, its controls and its arms into ``options.out`` (new or empty)."""
    instances = load_instances(options.instances)
    predictions = _predictions(options, instances)
    control = _control(options, [name for name, _ in options.predictions])
    if options.out.exists() and any(options.out.iterdir()):
        raise UserError(f"{options.out}: exists and is not empty; pass a new --out directory")
    if options.dockerfile_template is not None and options.environment is not None:
        raise UserError("give --environment or --dockerfile-template, not both")
    if options.dockerfile_template is not None and not options.dockerfile_template.is_file():
        raise UserError(f"{options.dockerfile_template}: Dockerfile template not found")
    if options.negatives < 0 or options.negatives > len(instances):
        raise UserError(f"--negatives must be between 0 and {len(instances)} (the instances)")
    clones = {i.repo: _clone_of(options.repos, i) for i in instances}
    options.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=options.out.parent, prefix=f".{options.out.name}.part-"))
    try:
        result = _write(options, instances, clones, predictions, control, work, say)
        if options.out.exists():
            options.out.rmdir()
        os.replace(work, options.out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    result.out = options.out
    return result


def _write(
    options: ImportOptions,
    instances: list[Instance],
    clones: dict[str, Path],
    predictions: dict[str, dict[str, str]],
    control: str,
    out: Path,
    say: Callable[[str], None],
) -> Imported:
    suite = out / "suite"
    for folder in ("repos", "hidden"):
        (suite / folder).mkdir(parents=True)
    lines: list[dict[str, Any]] = []
    trees: dict[str, dict[str, str]] = {}  # repo -> instance id -> tree
    fixtures: dict[str, str] = {}  # instance id -> fixture commit
    largest = (0, 0)  # (files, bytes) of the largest tree
    by_repo: dict[str, list[Instance]] = {}
    for instance in instances:
        by_repo.setdefault(instance.repo, []).append(instance)
    environments = _environments(options, instances, suite)
    for repo, group in sorted(by_repo.items()):
        say(f"import: {repo}: {len(group)} instances from {clones[repo]}")
        with _Scratch(clones[repo]) as scratch:
            trees[repo] = {}
            for instance in group:
                tree = scratch.tree_of(instance)
                trees[repo][instance.instance_id] = tree
                fixtures[instance.instance_id] = scratch.fixture_commit(tree, repo)
                files, size = scratch.tree_size(tree)
                largest = max(largest, (files, size))
                hidden = scratch.hidden_members(instance, tree)
                (suite / "hidden" / f"{instance.instance_id}.tar").write_bytes(
                    build_tar(hidden, uid=0, gid=0)
                )
            scratch.bundle(suite / "repos" / _bundle_name(repo))
    for instance in instances:
        lines.append(_task_line(instance, fixtures[instance.instance_id], options, environments))
    negatives = _negatives(options, instances, fixtures, environments, clones, trees)
    lines += negatives
    lines.sort(key=lambda line: str(line["id"]))
    (suite / "tasks.jsonl").write_text(
        "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines),
        encoding="utf-8",
    )
    gold = out / "gold"
    gold.mkdir()
    for instance in instances:
        (gold / f"{instance.instance_id}.diff").write_text(instance.patch, encoding="utf-8")
    counts: dict[str, int] = {}
    for name, patches in predictions.items():
        arm_dir = out / "predictions" / name
        arm_dir.mkdir(parents=True)
        # An instance the file lacks, and every negative control (a recorded model never
        # saw them, so it never abstains on them), is an empty patch.
        for line in lines:
            task_id = str(line["id"])
            (arm_dir / f"{task_id}.diff").write_text(patches.get(task_id, ""), encoding="utf-8")
        counts[name] = sum(1 for i in instances if patches.get(i.instance_id, "").strip())
    arms = list(predictions)
    if control == "empty" or not arms:
        arms.append("empty")
    (out / "controls.yaml").write_text(
        _controls(options, arms, control or "empty", largest), encoding="utf-8"
    )
    return Imported(
        out=out,
        tasks=len(instances),
        negatives=len(negatives),
        repositories=sorted(by_repo),
        environments=sorted(set(environments.values())),
        arms=arms,
        control=control or "empty",
        resolved_by_arm=counts,
    )


def _task_line(
    instance: Instance, commit: str, options: ImportOptions, environments: dict[str, str]
) -> dict[str, Any]:
    prompt = instance.problem_statement.strip()
    if options.with_hints and instance.hints_text.strip():
        prompt += "\n\nHints:\n" + instance.hints_text.strip()
    line: dict[str, Any] = {
        "id": instance.instance_id,
        "kind": "ordinary",
        "prompt": prompt or instance.instance_id,
        "repo": {"git": f"repos/{_bundle_name(instance.repo)}", "commit": commit},
        "hidden": f"hidden/{instance.instance_id}.tar",
        "hidden_tests": list(instance.tests),
        "tags": _tags(instance),
    }
    environment = environments.get(instance.instance_id)
    if environment is not None:
        line["environment"] = environment
    return line


def _tags(instance: Instance) -> list[str]:
    tags = [f"repo:{instance.repo}", f"base:{instance.base_commit}"]
    if instance.version:
        tags.append(f"version:{instance.version}")
    return tags


def _environments(options: ImportOptions, instances: list[Instance], suite: Path) -> dict[str, str]:
    """Environment name by instance id: one per (repo, version), made from the template or
    the layout's own Dockerfile; every instance in ``--environment NAME``; none otherwise."""
    if options.environment is not None:
        return {i.instance_id: options.environment for i in instances}
    found: dict[str, str] = {}
    made: dict[str, str] = {}  # environment name -> Dockerfile text
    for instance in instances:
        text = instance.dockerfile
        if text is None and options.dockerfile_template is not None:
            text = _read_text(options.dockerfile_template)
            for key, value in (
                ("repo", instance.repo),
                ("version", instance.version),
                ("base_commit", instance.base_commit),
            ):
                text = text.replace("{{" + key + "}}", value)
        if text is None:
            continue
        name = _environment_name(instance)
        if made.setdefault(name, text) != text:
            raise UserError(
                f"instance {instance.instance_id!r}: its Dockerfile differs from another "
                f"instance's of {instance.repo} version {instance.version or '(none)'}; one "
                "environment per (repo, version) needs one Dockerfile"
            )
        found[instance.instance_id] = name
    for env_name, text in made.items():
        context = suite / "environments" / env_name
        context.mkdir(parents=True)
        (context / "Dockerfile").write_text(text, encoding="utf-8")
        template = options.dockerfile_template
        if template is not None:
            for extra in sorted(template.parent.iterdir()):
                if extra != template and not extra.name.startswith("."):
                    copy = shutil.copytree if extra.is_dir() else shutil.copy2
                    copy(extra, context / extra.name)
    return found


def _environment_name(instance: Instance) -> str:
    raw = instance.repo.replace("/", "__") + (f"-{instance.version}" if instance.version else "")
    name = re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip("-._")[:64]
    return name or "env"


def _negatives(
    options: ImportOptions,
    instances: list[Instance],
    fixtures: dict[str, str],
    environments: dict[str, str],
    clones: dict[str, Path],
    trees: dict[str, dict[str, str]],
) -> list[dict[str, Any]]:
    """Negative controls: tasks on an instance's tree asking to fix a module that does not
    exist in it. Only abstaining is correct; they are marked kind negative and tagged."""
    if options.negatives == 0:
        return []
    ordered = sorted(instances, key=lambda i: i.instance_id)
    step = len(ordered) / options.negatives
    chosen = [ordered[int(k * step)] for k in range(options.negatives)]
    lines = []
    for instance in chosen:
        tree = trees[instance.repo][instance.instance_id]
        with _Scratch(clones[instance.repo]) as scratch:
            paths = scratch.paths(tree)
        missing = _missing_module(instance.instance_id, paths)
        symbol = "export_" + hashlib.sha256(instance.instance_id.encode()).hexdigest()[:6]
        line: dict[str, Any] = {
            "id": f"{instance.instance_id}.negative",
            "kind": "negative",
            "prompt": (
                f"`{symbol}()` in `{missing}` raises KeyError when it is given an empty "
                f"mapping; it should return an empty list instead. Fix `{symbol}` in "
                f"`{missing}` and keep its other behaviour."
            ),
            "repo": {
                "git": f"repos/{_bundle_name(instance.repo)}",
                "commit": fixtures[instance.instance_id],
            },
            "tags": ["negative", "generated", f"repo:{instance.repo}"],
        }
        if instance.instance_id in environments:
            line["environment"] = environments[instance.instance_id]
        lines.append(line)
    return lines


def _missing_module(seed: str, paths: set[str]) -> str:
    """A module path beside the tree's Python packages that the tree does not have."""
    packages = sorted(
        {p.rsplit("/", 1)[0] for p in paths if p.endswith("/__init__.py") and p.count("/") <= 2}
    )
    folder = packages[0] if packages else ""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    for i in range(0, 60, 6):
        candidate = f"{folder}/_legacy_export_{digest[i : i + 6]}.py".lstrip("/")
        if candidate not in paths:
            return candidate
    raise UserError(f"instance {seed!r}: cannot name a module its tree lacks")


def _controls(
    options: ImportOptions, arms: list[str], control: str, largest: tuple[int, int]
) -> str:
    files, size = largest
    workspace_mb = max(512, -(-(size * 3) // (1 << 20)) + 256)
    arm_list: list[dict[str, Any]] = []
    for name in arms:
        agent: dict[str, Any] = (
            {"type": "scripted", "action": "noop"}
            if name == "empty"
            else {"type": "patch", "dir": f"predictions/{name}"}
        )
        entry: dict[str, Any] = {"name": name}
        if name == control:
            entry["control"] = True
        entry["agent"] = agent
        arm_list.append(entry)
    document = {
        "protocol_id": f"swebench-{_arm_name(options.out.name) or 'import'}",
        "channel": "exploratory",
        "suite": {"file": "suite/tasks.jsonl"},
        "runtime": {
            "repeats": 1,
            "max_retries": 0,
            "timeout_s": options.timeout_s,
            "verify_timeout_s": options.timeout_s,
            "limits": {"memory": "4g", "cpus": 1.0, "pids": 512, "workspace": f"{workspace_mb}m"},
            "network": "none",
            "image": SANDBOX_IMAGE,
            "archive": {
                "max_members": max(20_000, files * 2),
                "max_member_bytes": "64m",
                "max_total_bytes": f"{max(512, -(-(size * 2) // (1 << 20)))}m",
            },
        },
        "tools": {"forbidden_paths": [".git/"]},
        "arms": arm_list,
    }
    header = (
        "# Written by `deltarun import swebench`. Arms: one per predictions file (its\n"
        "# patches under predictions/<arm>/), 'empty' makes no change. Gold patches are in\n"
        "# gold/ for `deltarun validate`.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


def write_exclude(controls: Path, task_ids: list[str]) -> None:
    """Put ``task_ids`` into the imported controls' ``suite.exclude`` (kept comments first)."""
    text = _read_text(controls)
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    document = yaml.safe_load(text)
    document["suite"]["exclude"] = task_ids
    write_atomic(controls, (header + yaml.safe_dump(document, sort_keys=False)).encode())


def _predictions(options: ImportOptions, instances: list[Instance]) -> dict[str, dict[str, str]]:
    known = {i.instance_id for i in instances}
    found: dict[str, dict[str, str]] = {}
    for name, path in options.predictions:
        if name in found or name == "empty":
            raise UserError(f"{path}: arm name {name!r} is taken; name it with NAME=FILE")
        found[name] = parse_predictions(_read_text(path), str(path), known).patches
    return found


def _control(options: ImportOptions, names: list[str]) -> str:
    if options.control is None:
        return names[0] if names else "empty"
    if options.control != "empty" and options.control not in names:
        raise UserError(
            f"--control {options.control!r} is not an arm; choose one of "
            f"{', '.join([*names, 'empty'])}"
        )
    return options.control


def arm_for(spec: str) -> tuple[str, Path]:
    """``NAME=FILE`` or ``FILE`` (named after the file) of ``--predictions``."""
    if "=" in spec and not Path(spec).exists():
        name, _, file = spec.partition("=")
    else:
        file = spec
        name = Path(spec).name.split(".")[0]
    name = _arm_name(name)
    if not name:
        raise UserError(f"--predictions {spec}: name the arm with NAME=FILE")
    path = Path(file)
    if not path.is_file():
        raise UserError(f"--predictions {spec}: {path} not found")
    return name, path


def _arm_name(raw: str) -> str:
    return ARM_RE.sub("-", raw).strip("-._")[:60]


def _bundle_name(repo: str) -> str:
    return repo.replace("/", "__") + ".bundle"


def _clone_of(repos: Path, instance: Instance) -> Path:
    owner, name = instance.repo.split("/", 1)
    for candidate in (repos / f"{owner}__{name}", repos / owner / name):
        if (candidate / ".git").exists() or (candidate / "objects").is_dir():
            return candidate
    raise UserError(
        f"instance {instance.instance_id!r}: repository {instance.repo} not found under "
        f"{repos} (looked for {owner}__{name}/ and {owner}/{name}/); clone it there"
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from exc


class _Scratch:
    """A scratch bare repository borrowing a clone's objects (alternates): the fixture
    commits and the test patch's index live here, never in the user's clone."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.refs: dict[str, str] = {}

    def __enter__(self) -> _Scratch:
        self._tmp = tempfile.TemporaryDirectory(prefix="deltarun-import-")
        self.dir = Path(self._tmp.name) / "scratch.git"
        source = self._git_dir_of_clone()
        self._run(["init", "-q", "--bare", str(self.dir)], git_dir=None)
        (self.dir / "objects" / "info" / "alternates").write_text(
            str((source / "objects").resolve()) + "\n"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()

    def _git_dir_of_clone(self) -> Path:
        dot = self.clone / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():  # a worktree or submodule: ask git
            out = self._run(["rev-parse", "--git-common-dir"], git_dir=None, cwd=self.clone)
            return (self.clone / out.decode().strip()).resolve()
        return self.clone

    def _run(
        self,
        args: Sequence[str],
        git_dir: Path | str | None = "scratch",
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        what: str = "",
    ) -> bytes:
        argv = ["git", *_SETTINGS]
        if git_dir == "scratch":
            argv += ["--git-dir", str(self.dir)]
        elif isinstance(git_dir, Path):
            argv += ["--git-dir", str(git_dir)]
        try:
            result = subprocess.run(
                [*argv, *args],
                input=stdin,
                env={**_BASE_ENV, **_COMMIT_ENV, **(env or {})},
                cwd=cwd,
                capture_output=True,
                check=False,
                timeout=600,
            )
        except FileNotFoundError as exc:
            raise UserError("git is not installed; install it (apt-get install git)") from exc
        if result.returncode != 0:
            lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
            message = lines[-1] if lines else ""
            if what:
                raise UserError(what + (f" ({message})" if message else ""))
            raise UserError(f"git {args[0]} in {self.clone}: {message or 'failed'}")
        return result.stdout

    def tree_of(self, instance: Instance) -> str:
        what = (
            f"instance {instance.instance_id!r}: commit {instance.base_commit} of "
            f"{instance.repo} (in {self.clone})"
        )
        out = self._run(
            ["rev-parse", "--verify", "--quiet", f"{instance.base_commit}^{{tree}}"],
            what=f"{what} not found; fetch it into the clone",
        )
        return out.decode().strip()

    def fixture_commit(self, tree: str, repo: str) -> str:
        """A parentless commit of ``tree`` (fixed identity and date): the fixture's commit."""
        commit = (
            self._run(["commit-tree", tree, "-m", f"deltarun import: {repo} tree {tree}"])
            .decode()
            .strip()
        )
        self._run(["update-ref", f"refs/heads/t{tree[:16]}", commit])
        self.refs[tree] = commit
        return commit

    def tree_size(self, tree: str) -> tuple[int, int]:
        listing = self._run(["ls-tree", "-r", "-l", "-z", tree]).split(b"\0")
        sizes = [line.split(None, 4)[3] for line in listing if line]
        return len(sizes), sum(int(s) for s in sizes if s.isdigit())

    def paths(self, tree: str) -> set[str]:
        listing = self._run(["ls-tree", "-r", "--name-only", "-z", tree]).split(b"\0")
        return {p.decode("utf-8", "surrogateescape") for p in listing if p}

    def hidden_members(self, instance: Instance, tree: str) -> list[Member]:
        """The files ``test_patch`` creates or changes, after applying it at the tree."""
        where = f"instance {instance.instance_id!r}: test_patch"
        data = instance.test_patch.encode("utf-8", "surrogateescape")
        try:
            paths = list(dict.fromkeys(touched_paths(data)))
        except PatchError as exc:
            raise UserError(f"{where} is not a patch git reads ({exc})") from exc
        if not paths:
            raise UserError(f"{where} changes no file; the hidden tests come from it")
        index = self.dir / "import.index"
        env = {"GIT_INDEX_FILE": str(index)}
        self._run(["read-tree", tree], env=env)
        self._run(
            ["apply", "--cached", "--whitespace=nowarn", "-"],
            stdin=data,
            env=env,
            what=f"{where} does not apply at base_commit {instance.base_commit}",
        )
        staged = self._run(["ls-files", "-s", "-z", "--", *paths], env=env).split(b"\0")
        members: list[Member] = []
        for entry in staged:
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            mode, blob, _stage = meta.decode().split()
            path = raw_path.decode("utf-8", "surrogateescape")
            if path not in paths:
                continue  # a file under a touched directory, not touched itself
            if mode not in ("100644", "100755"):
                raise UserError(f"{where}: {path} is not a regular file (mode {mode})")
            content = self._run(["cat-file", "blob", blob])
            members.append(Member(path, False, content, mode == "100755"))
        index.unlink(missing_ok=True)
        if not members:
            raise UserError(f"{where} only deletes files; the hidden tests come from it")
        return sorted(members, key=lambda m: m.path)

    def bundle(self, out: Path) -> None:
        refs = [f"refs/heads/t{tree[:16]}" for tree in sorted(self.refs)]
        self._run(["bundle", "create", "-q", str(out), *refs])
