"""The environments of an import: one per (repo, version), from a Dockerfile template,
the task-directory layout's own Dockerfile or the per-repository specs
(``runner.swebench.specs``), and the specs file itself, read before anything is written."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from runner.bounded_input import read_capped
from runner.errors import UsageError, UserError
from runner.swebench.instances import Instance
from runner.swebench.pins import pin_specs
from runner.swebench.rows import DOCUMENT_BOUNDS
from runner.swebench.specs import SPECS_MAX_BYTES, Spec, Specs, dockerfile, parse_specs
from runner.swebench.wheels import fetch_wheels

SANDBOX_IMAGE = "deltarun/sandbox-python:bookworm"
# The sandbox image on the Debian release whose python3 is a spec's ``python``
# (``make python-bases`` builds the other two); any other Python: an instance image.
PYTHON_BASES = {
    "3.9": "deltarun/sandbox-python:bullseye",
    "3.11": SANDBOX_IMAGE,
    "3.13": "deltarun/sandbox-python:trixie",
}


def suite_image(instances: list[Instance], specs: Specs, from_specs: bool = True) -> str:
    """The sandbox base of an import (``runtime.image``, on which ``deltarun build`` builds
    every environment): the one whose Debian release has the Python the specs pin, the
    bookworm one (3.11) when they pin none, or another (its build then names the version
    found). One suite has one base: specs pinning two of these Pythons are refused."""
    pinned = {
        spec.python
        for i in instances
        if (spec := specs.of(i.repo, i.version)) is not None and spec.python in PYTHON_BASES
    }
    if not from_specs or not pinned:
        return SANDBOX_IMAGE
    if len(pinned) > 1:
        raise UserError(
            f"the specs pin Python {' and '.join(sorted(pinned))}: one suite's environments are "
            "built on one base image; import each Python's instances into a suite of its own, "
            "or give --instance-image"
        )
    return PYTHON_BASES[pinned.pop()]


def read_specs(path: Path | None, instances: list[Instance], say: Callable[[str], None]) -> Specs:
    """The specs file, read and checked before anything is written (warnings said)."""
    if path is None:
        return Specs({})
    if not path.is_file():
        raise UsageError(f"{path}: specs file not found")
    specs = parse_specs(read_text(path, SPECS_MAX_BYTES), str(path))
    for warning in specs.warnings:
        say(f"warning: {warning}")
    used = {(i.repo, i.version) for i in instances}
    for repo, version in sorted(set(specs.by_key) - used):
        say(f"warning: {path}: {repo} {version}: no instance uses this spec")
    return specs


def make_environments(
    environment: str | None,
    template: Path | None,
    instances: list[Instance],
    suite: Path,
    specs: Specs,
    say: Callable[[str], None],
) -> dict[str, str]:
    """Environment name by instance id: one per (repo, version), made from the template,
    the layout's own Dockerfile or the specs; every instance in ``--environment NAME``;
    none otherwise."""
    if environment is not None:
        return {i.instance_id: environment for i in instances}
    if template is None:  # unpinned pip_packages of the specs environments are made from
        specs = pin_specs(specs, _made_from_specs(instances), say)
    found: dict[str, str] = {}
    base = suite_image(instances, specs)
    if base != SANDBOX_IMAGE:
        say(f"import: environments are built on {base} (`make python-bases` builds it)")
    made: dict[str, str] = {}  # environment name -> Dockerfile text
    wheels: dict[str, tuple[Spec, str]] = {}  # name -> the spec it installs, where it is
    for instance in instances:
        text = instance.dockerfile
        spec = specs.of(instance.repo, instance.version)
        from_specs = text is None and template is None
        if from_specs and spec is not None and spec.needs_environment:
            text = dockerfile(spec, base, bool(spec.pip_packages))
            if spec.pip_packages:
                where = f"{specs.source}: {instance.repo} {instance.version}"
                wheels[environment_name(instance)] = (spec, where)
        if text is None and template is not None:
            text = read_text(template)
            for key, value in (
                ("repo", instance.repo),
                ("version", instance.version),
                ("base_commit", instance.base_commit),
            ):
                text = text.replace("{{" + key + "}}", value)
        if text is None:
            continue
        name = environment_name(instance)
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
        if env_name in wheels:
            fetch_wheels(*wheels[env_name], context / "wheels", say)
        if template is not None:
            for extra in sorted(template.parent.iterdir()):
                if extra != template and not extra.name.startswith("."):
                    copy = shutil.copytree if extra.is_dir() else shutil.copy2
                    copy(extra, context / extra.name)
    return found


def _made_from_specs(instances: list[Instance]) -> set[tuple[str, str]]:
    """The (repo, version) of the instances whose environment the specs make: not those
    with a Dockerfile of their own (a task folder's), whose specs install nothing."""
    return {(i.repo, i.version) for i in instances if i.dockerfile is None}


def environment_name(instance: Instance) -> str:
    raw = instance.repo.replace("/", "__") + (f"-{instance.version}" if instance.version else "")
    name = re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip("-._")[:64]
    return name or "env"


def read_text(path: Path, cap: int = DOCUMENT_BOUNDS.max_bytes) -> str:
    """A UTF-8 file of an import (instances, predictions, specs, a task folder's files), at
    most ``cap`` bytes (``bounded_input.read_capped``)."""
    try:
        return read_capped(path, cap, "an input of `deltarun import swebench`").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from exc
