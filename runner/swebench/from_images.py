"""``deltarun import swebench --instance-image TEMPLATE``: each instance's image (SWE-bench's
``sweb.eval.x86_64.<id>``, Epoch AI's, a team's own) is both where its fixture comes from
and where its trials run.

For each instance: the image named by the template (``runner.sandbox.instance_layer``:
``{instance_id}``, ``{swebench_id}``, ``{repo}``, ``{version}``, or the layouts
``swebench`` and ``epoch``), pulled when absent; its repository's ``.git`` taken out (the
importer makes the fixture at ``base_commit`` from it as from a local clone, so no clone
is needed); deltarun's layer built over it and checked by the sandbox preflight; the
task runs on the adapted image (``image``, its local tag, pinned by ID when the run
starts).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from runner.config.runtime import Runtime
from runner.errors import UserError
from runner.paths import under
from runner.sandbox.engine import connect
from runner.sandbox.image_build import DockerImageBuilder
from runner.sandbox.instance_images import InstanceImages
from runner.sandbox.instance_layer import reference_of
from runner.swebench.image_tree import commit_tree
from runner.swebench.instances import Instance
from runner.swebench.specs import Specs

TREES = ("commit", "image")  # --instance-tree
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}


@dataclass
class FromImages:
    """What the images gave: a git directory per repository (every image's objects, by
    alternates) and the adapted image's tag per instance."""

    clones: dict[str, Path] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    # The instances as imported: with the image's working tree, each base_commit is the
    # commit of that tree (``runner.swebench.image_tree``).
    instances: list[Instance] = field(default_factory=list)


class Asked(Protocol):
    """What ``sources`` reads of the import's options (``importer.ImportOptions``)."""

    @property
    def instances(self) -> Path: ...
    @property
    def repos(self) -> Path | None: ...
    @property
    def environment(self) -> str | None: ...
    @property
    def dockerfile_template(self) -> Path | None: ...
    @property
    def instance_image(self) -> str | None: ...
    @property
    def instance_repo(self) -> str: ...
    @property
    def instance_tree(self) -> str: ...


def sources(
    options: Asked,
    instances: list[Instance],
    specs: Specs,
    held: Path,
    say: Callable[[str], None],
) -> FromImages:
    """Each repository's clone: the local one under ``--repos``, or taken out of the
    instance images (``--instance-image``, the repository at ``--instance-repo`` in them),
    with each instance's adapted image."""
    if options.instance_image is None:
        repos = options.repos
        if repos is None:
            raise UserError("give --repos DIR (local clones) or --instance-image TEMPLATE")
        clones = {i.repo: _clone_of(repos, i, options.instances) for i in instances}
        return FromImages(clones, instances=list(instances))
    if options.environment is not None or options.dockerfile_template is not None:
        raise UserError(
            "--instance-image: the instance image is the environment; give no --environment "
            "or --dockerfile-template"
        )
    if options.instance_tree not in TREES:
        raise UserError(f"--instance-tree {options.instance_tree!r}: choose commit or image")
    image = (options.instance_image, options.instance_repo, options.instance_tree)
    return take_instances(image, instances, specs, held, say)


def _clone_of(repos: Path, instance: Instance, source: Path) -> Path:
    """The local clone of an instance's ``repo`` under ``--repos`` (``owner/name`` is a
    string of the instances file: one that climbs out with ``..`` is refused)."""
    owner, name = instance.repo.split("/", 1)
    where = f"{source}: instance {instance.instance_id!r}"
    for relative in (f"{owner}__{name}", f"{owner}/{name}"):
        candidate = under(repos, relative, file=where, field="repo")
        if (candidate / ".git").exists() or (candidate / "objects").is_dir():
            return candidate
    raise UserError(
        f"instance {instance.instance_id!r}: repository {instance.repo} not found under "
        f"{repos} (looked for {owner}__{name}/ and {owner}/{name}/); clone it there"
    )


def take_instances(
    image: tuple[str, str, str],
    instances: list[Instance],
    specs: Specs,
    scratch: Path,
    say: Callable[[str], None],
) -> FromImages:
    """Every instance's image present (``image``: the template, the repository's path in
    it, and which tree: ``commit``, its ``.git`` at base_commit, taken out under
    ``scratch``; ``image``, its working tree) and its adapted image built (or reused); see
    the module docstring."""
    template, repo_path, tree = image
    for instance in instances:
        spec = specs.of(instance.repo, instance.version)
        if spec is not None and (spec.needs_environment or spec.install):
            say(
                f"warning: {instance.repo} {instance.version}: the instance image is the "
                "environment, its project already installed (SWE-bench's evaluation does not "
                "install again); the spec's install, pip_packages, python and env_vars are "
                "not applied"
            )
            break
    client = connect(api_timeout_s=3600)
    images = InstanceImages(client, say)
    builder = DockerImageBuilder(client)
    runtime = Runtime()
    found = FromImages()
    for number, instance in enumerate(instances):
        reference = reference_of(template, instance.instance_id, instance.repo, instance.version)
        source = images.present(reference)
        path = images.environment(source)
        if instance.repo not in found.clones:
            found.clones[instance.repo] = _git(scratch / f"repo-{len(found.clones)}.git")
        where = (images, source, reference, repo_path, scratch / f"image-{number}")
        instance = _fixture(where, tree, instance, found.clones[instance.repo], say)
        adapted = images.adapt(
            reference,
            source,
            instance.instance_id,
            repo_path,
            path,
            lambda image: builder.preflight(image, runtime),
        )
        found.images[instance.instance_id] = adapted.tag
        found.instances.append(instance)
        environment = ":".join(path) or "the image's PATH"
        say(
            f"import: {instance.instance_id}: {reference} ({source[:19]}) -> {adapted.tag}"
            f"{' (reused)' if adapted.reused else ''}; environment {environment}"
        )
    return found


def _fixture(
    where: tuple[InstanceImages, str, str, str, Path],
    tree: str,
    instance: Instance,
    clone: Path,
    say: Callable[[str], None],
) -> Instance:
    """The instance with its fixture's commit in ``clone``: the image's working tree as
    one commit (``tree`` image; the instance's base_commit becomes it), or its base_commit
    read from the image's ``.git`` (``commit``; skipped when another image's has it)."""
    images, source, reference, repo_path, scratch = where
    if tree == "image":
        with images.spooled(source, repo_path) as spool:
            message = f"deltarun import: {repo_path} of {reference} ({instance.base_commit})\n"
            ref = f"refs/deltarun/{scratch.name}"
            commit, links = commit_tree(spool, clone, ref, message, f"image {source[:19]}")
        say(f"import: {instance.instance_id}: {repo_path} as the image has it: {commit}")
        if links:
            shown = ", ".join(links[:3]) + (" and more" if len(links) > 3 else "")
            say(
                f"warning: {instance.instance_id}: {len(links)} symbolic link(s) left out of "
                f"the fixture, which takes regular files only: {shown}"
            )
        return replace(instance, base_commit=commit)
    if not _has_commit(clone, instance.base_commit):
        git = images.take_git(source, repo_path, scratch)
        say(f"import: {instance.repo}: {repo_path}/.git taken out of {source[:19]}")
        with (clone / "objects" / "info" / "alternates").open("a", encoding="utf-8") as alt:
            alt.write(f"{(git / 'objects').resolve()}\n")
    return instance


def _git(bare: Path) -> Path:
    """A new bare repository, reading the objects of every image's
    ``.git`` added to its alternates: one clone per repository, whichever image holds an
    instance's base commit."""
    try:
        subprocess.run(
            ["git", "init", "-q", "--bare", str(bare)],
            env=_GIT_ENV,
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"git init of the images' repository failed: {exc}") from exc
    (bare / "objects" / "info" / "alternates").touch()
    return bare


def _has_commit(bare: Path, commit: str) -> bool:
    """Whether the images' objects read so far hold ``commit`` (a large repository's
    ``.git`` is taken out of one image, not of each of its instances')."""
    try:
        done = subprocess.run(
            ["git", "--git-dir", str(bare), "cat-file", "-e", f"{commit}^{{commit}}"],
            env=_GIT_ENV,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"git cat-file in the images' repository failed: {exc}") from exc
    return done.returncode == 0


def set_images(lines: list[dict[str, Any]], images: dict[str, str]) -> None:
    """Each task line of an instance (and its negative control) runs on its adapted image."""
    for line in lines:
        task_id = str(line["id"])
        source = task_id.removesuffix(".negative")
        if source in images:
            line["image"] = images[source]
