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
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.bounded_input import YamlBounds, load_yaml
from runner.bounded_json import BoundsError, loads_bounded
from runner.errors import UserError
from runner.paths import inside, new_folder
from runner.swebench.from_images import FromImages, set_images, sources
from runner.swebench.import_envs import make_environments, read_specs, read_text, suite_image
from runner.swebench.instances import Instance, instance_of, parse_instances
from runner.swebench.predictions import parse_predictions
from runner.swebench.rows import LINE_BOUNDS
from runner.swebench.scratch import Scratch
from runner.swebench.specs import Specs
from runner.swebench.test_ids import declare
from runner.trees.archives import build_tar, read_members

ARM_RE = re.compile(r"[^A-Za-z0-9._-]+")
# The arm deltarun adds that changes nothing; a user's arm may take any other name (a
# predictions arm called "no-change" moves it to the next name free).
NO_CHANGE = ("no-change", "deltarun-no-change", "deltarun-no-change-arm")
TASK_YAML = YamlBounds(max_chars=1 << 20)  # a task folder's task.yaml: a few fields


@dataclass(frozen=True)
class ImportOptions:
    """What ``deltarun import swebench`` was asked to do."""

    instances: Path
    repos: Path | None  # None with instance_image: the repositories come out of the images
    out: Path
    environment: str | None = None
    dockerfile_template: Path | None = None
    with_hints: bool = False
    negatives: int = 0
    predictions: tuple[tuple[str, Path], ...] = ()  # (arm name, file)
    control: str | None = None  # an arm name, or no_change_arm(); default the first predictions
    timeout_s: float = 1800.0
    specs: Path | None = None  # per-repository specs (runner.swebench.specs)
    instance_image: str | None = None  # a template (runner.swebench.from_images)
    instance_repo: str = "/testbed"  # the repository's path in an instance image
    instance_tree: str = "commit"  # its git tree at base_commit, or "image": as it is there


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
        return parse_instances(read_text(path), str(path))
    if not path.is_dir():
        raise UserError(f"{path}: not found; pass an instances file (.jsonl/.json) or a folder")
    tasks = path.resolve()
    if (path / "tasks").is_dir():
        tasks = inside(path, "tasks", file=path, field="tasks")
    found = [
        _layout_instance(tasks, entry.name) for entry in sorted(tasks.iterdir()) if entry.is_dir()
    ]
    if not found:
        raise UserError(f"{tasks}: no task folders (tasks/<instance_id>/task.yaml)")
    return found


def _layout_instance(tasks: Path, instance_id: str) -> Instance:
    """The instance of the task folder ``tasks/<instance_id>``; it and each file it is read
    from are held inside ``tasks`` (a link that leads out is refused)."""
    folder = inside(tasks, instance_id, file=tasks, field="task folder")

    def file(name: str) -> Path:
        return inside(folder, name, file=folder, field=name, root=tasks)

    spec_path = file("task.yaml")
    if not spec_path.is_file():
        raise UserError(f"{spec_path}: missing; every task folder needs task.yaml")
    try:
        spec = load_yaml(read_text(spec_path, TASK_YAML.max_chars), TASK_YAML) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{spec_path}: not valid YAML ({exc})".splitlines()[0]) from exc
    except BoundsError as exc:
        raise UserError(f"{spec_path}: refused: {exc}") from None
    if not isinstance(spec, dict):
        raise UserError(f"{spec_path}: must be a mapping of instance fields")
    row: dict[str, Any] = {"instance_id": instance_id, **spec}
    for name, key in (
        ("problem_statement.md", "problem_statement"),
        ("gold.patch", "patch"),
        ("test.patch", "test_patch"),
    ):
        if file(name).is_file():
            row[key] = read_text(file(name))
    tests_path = file("tests.json")
    if tests_path.is_file():
        try:
            tests = loads_bounded(read_text(tests_path).encode("utf-8"), LINE_BOUNDS)
        except BoundsError as exc:
            reason = str(exc).removeprefix("not JSON: ")
            raise UserError(f"{tests_path}: not valid JSON ({reason})") from None
        if not isinstance(tests, dict):
            raise UserError(f"{tests_path}: must be an object with FAIL_TO_PASS, PASS_TO_PASS")
        row.update({k: v for k, v in tests.items() if k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
    dockerfile = file("Dockerfile")
    text = read_text(dockerfile) if dockerfile.is_file() else None
    return instance_of(row, str(folder), dockerfile=text)


def import_swebench(options: ImportOptions, say: Callable[[str], None]) -> Imported:
    """Write the suite, its controls and its arms into ``options.out`` (new or empty)."""
    instances = load_instances(options.instances)
    predictions = _predictions(options, instances)
    control = _control(options, [name for name, _ in options.predictions])
    new_folder(options.out)
    if options.dockerfile_template is not None and options.environment is not None:
        raise UserError("give --environment or --dockerfile-template, not both")
    if options.dockerfile_template is not None and not options.dockerfile_template.is_file():
        raise UserError(f"{options.dockerfile_template}: Dockerfile template not found")
    if options.negatives < 0 or options.negatives > len(instances):
        raise UserError(f"--negatives must be between 0 and {len(instances)} (the instances)")
    specs = read_specs(options.specs, instances, say)
    with tempfile.TemporaryDirectory(prefix="deltarun-instances-") as held:
        taken = sources(options, instances, specs, Path(held), say)
        options.out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=options.out.parent, prefix=f".{options.out.name}.part-"))
        try:
            result = _write(options, taken, predictions, control, work, say, specs)
            new_folder(options.out)  # again: nothing took its place meanwhile
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
    taken: FromImages,
    predictions: dict[str, dict[str, str]],
    control: str,
    out: Path,
    say: Callable[[str], None],
    specs: Specs,
) -> Imported:
    """Write the suite (repositories, hidden files, tasks, environments), the gold patches,
    the arms and the controls into ``out``.

    Longer than the house's ~60 lines on purpose: one step per part of the suite, in the
    order each needs the last."""
    suite, instances = out / "suite", taken.instances
    for folder in ("repos", "hidden"):
        (suite / folder).mkdir(parents=True)
    lines: list[dict[str, Any]] = []
    trees: dict[str, dict[str, str]] = {}  # repo -> instance id -> tree
    fixtures: dict[str, str] = {}  # instance id -> fixture commit
    largest = (0, 0)  # (files, bytes) of the largest tree
    by_repo: dict[str, list[Instance]] = {}
    for instance in instances:
        by_repo.setdefault(instance.repo, []).append(instance)
    environments = {}
    if options.instance_image is None:
        environments = make_environments(
            options.environment, options.dockerfile_template, instances, suite, specs, say
        )
    for repo, group in sorted(by_repo.items()):
        say(f"import: {repo}: {len(group)} instances from {taken.clones[repo]}")
        trees[repo] = {}
        found = _write_repo(suite, repo, group, taken.clones[repo], trees[repo], fixtures, say)
        largest = max(largest, found)
    for instance in instances:
        line = _task_line(instance, fixtures[instance.instance_id], options, environments)
        spec = specs.of(instance.repo, instance.version)
        if spec is not None and spec.install and options.instance_image is None:
            line["install"] = list(spec.install)
        if spec is not None and spec.pytest_args:
            line["pytest_args"] = list(spec.pytest_args)
        declare(
            line,
            spec.test_runner if spec is not None else "pytest",
            spec.runner_args if spec is not None else (),
            read_members(suite / "hidden" / f"{instance.instance_id}.tar"),
            instance.tests,
            f"{options.instances}: {instance.instance_id}",
        )
        lines.append(line)
    negatives = _negatives(options, instances, fixtures, environments, taken.clones, trees)
    lines += negatives
    set_images(lines, taken.images)
    lines.sort(key=lambda line: str(line["id"]))
    (suite / "tasks.jsonl").write_text(
        "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines),
        encoding="utf-8",
    )
    gold = out / "gold"
    gold.mkdir()
    for instance in instances:
        (gold / f"{instance.instance_id}.diff").write_text(instance.patch, encoding="utf-8")
    counts = _write_arms(out, lines, predictions, instances)
    arms = list(predictions)
    builtin = no_change_arm(arms)
    if control == builtin or not arms:
        arms.append(builtin)
    image = suite_image(instances, specs, options.instance_image is None)
    (out / "controls.yaml").write_text(
        _controls(options, arms, control or builtin, largest, builtin, image), encoding="utf-8"
    )
    return Imported(
        out=out,
        tasks=len(instances),
        negatives=len(negatives),
        repositories=sorted(by_repo),
        environments=sorted(set(environments.values())),
        arms=arms,
        control=control or builtin,
        resolved_by_arm=counts,
    )


def _write_arms(
    out: Path,
    lines: list[dict[str, Any]],
    predictions: dict[str, dict[str, str]],
    instances: list[Instance],
) -> dict[str, int]:
    """Each predictions file as a patch arm; how many instances each one resolves with a
    non-empty patch. An instance the file lacks, and every negative control (a recorded
    model never saw them, so it never abstains on them), is an empty patch."""
    counts: dict[str, int] = {}
    for name, patches in predictions.items():
        arm_dir = out / "predictions" / name
        arm_dir.mkdir(parents=True)
        for line in lines:
            task_id = str(line["id"])
            (arm_dir / f"{task_id}.diff").write_text(patches.get(task_id, ""), encoding="utf-8")
        counts[name] = sum(1 for i in instances if patches.get(i.instance_id, "").strip())
    return counts


def _write_repo(
    suite: Path,
    repo: str,
    group: list[Instance],
    clone: Path,
    trees: dict[str, str],
    fixtures: dict[str, str],
    say: Callable[[str], None],
) -> tuple[int, int]:
    """Fill ``trees`` and ``fixtures``, write the hidden tars and the bundle: largest tree."""
    largest = (0, 0)
    with Scratch(clone) as scratch:
        for instance in group:
            tree = scratch.fixture_tree(instance)
            trees[instance.instance_id] = tree
            fixtures[instance.instance_id] = scratch.fixture_commit(tree, repo)
            largest = max(largest, scratch.tree_size(tree))
            hidden = scratch.hidden_members(instance, tree)
            (suite / "hidden" / f"{instance.instance_id}.tar").write_bytes(
                build_tar(hidden, uid=0, gid=0)
            )
        scratch.bundle(suite / "repos" / _bundle_name(repo))
        scratch.say_links(repo, say)
    return largest


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
        with Scratch(clones[instance.repo]) as scratch:
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
    options: ImportOptions,
    arms: list[str],
    control: str,
    largest: tuple[int, int],
    builtin: str,
    image: str,
) -> str:
    files, size = largest
    workspace_mb = max(512, -(-(size * 3) // (1 << 20)) + 256)
    arm_list: list[dict[str, Any]] = []
    for name in arms:
        agent: dict[str, Any] = (
            {"type": "scripted", "action": "noop"}
            if name == builtin
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
            "image": image,
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
        f"# patches under predictions/<arm>/), {builtin!r} makes no change. Gold patches\n"
        "# are in gold/ for `deltarun validate`.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


def _predictions(options: ImportOptions, instances: list[Instance]) -> dict[str, dict[str, str]]:
    known = {i.instance_id for i in instances}
    found: dict[str, dict[str, str]] = {}
    for name, path in options.predictions:
        if name in found:
            raise UserError(f"{path}: arm name {name!r} is taken; name it with NAME=FILE")
        found[name] = parse_predictions(read_text(path), str(path), known).patches
    return found


def _control(options: ImportOptions, names: list[str]) -> str:
    builtin = no_change_arm(names)
    if options.control is None:
        return names[0] if names else builtin
    if options.control != builtin and options.control not in names:
        raise UserError(
            f"--control {options.control!r} is not an arm; choose one of "
            f"{', '.join([*names, builtin])}"
        )
    return options.control


def no_change_arm(names: list[str]) -> str:
    """The name of deltarun's arm that makes no change: the first of ``NO_CHANGE`` that no
    predictions arm takes (a user's arm may be called ``empty``, or even ``no-change``)."""
    free = [name for name in NO_CHANGE if name not in names]
    if not free:
        raise UserError(f"arm names {', '.join(NO_CHANGE)} are all taken; rename one")
    return free[0]


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
