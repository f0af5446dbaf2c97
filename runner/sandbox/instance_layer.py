"""Instance images as sandboxes: what deltarun's thin layer over an existing image is, and
how an image names the environment its commands run with. Pure: no Docker here (the
engine side is ``runner.sandbox.instance_images``).

An instance image (SWE-bench's ``sweb.eval.x86_64.<id>``, Epoch AI's registry, a team's
own) holds the repository at its own path (``/testbed``), an environment of its own
(a conda environment, activated by the shell profile rather than ``ENV PATH``), root as
the default user and the distribution's setuid files. deltarun layers onto it, built
locally and offline:

- the agent user, uid and gid 1000 (an entry of another name holding that uid or gid is
  dropped: the sandbox contract is uid 1000 named ``agent``);
- no setuid or setgid file (nothing in a sandbox may raise its privileges);
- the harness's directories (``/workspace``, ``/io``, ``/opt/agent``, the root-only
  ``/baseline``) as the sandbox base has them;
- the repository's path a link to ``/workspace``: its tree was taken out of the image as
  the task's fixture, and an editable install that points at ``/testbed`` finds the
  workspace's files there;
- the label ``deltarun.path``: the directories of the image's environment, put before the
  harness's ``PATH`` in every command of a sandbox of the image (``runner.sandbox.docker``).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex

from runner.errors import UserError
from runner.sandbox.base import AGENT_DIR, BASELINE_DIR, IO_DIR, WORKSPACE

PATH_LABEL = "deltarun.path"
REPO_LABEL = "deltarun.instance.repo"
SOURCE_LABEL = "deltarun.instance.source"
REFERENCE_LABEL = "deltarun.instance.reference"
TAG_PREFIX = "deltarun-instance"
# What a PATH of a Debian or Ubuntu image holds anyway; the rest of an image's ENV PATH is
# its environment's.
STANDARD_PATH = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
)
# SWE-bench's images (and Epoch AI's, built by the same harness) activate this conda
# environment in root's shell profile, not by ENV PATH.
SWEBENCH_ENV = "/opt/miniconda3/envs/testbed"
SWEBENCH_REPO = "/testbed"
# Where an agent or the code under test may write in a sandbox (tmpfs mounts and volumes):
# no directory of the image's environment may lead there, since root runs from PATH too.
WRITABLE = (WORKSPACE, IO_DIR, BASELINE_DIR, "/tmp", "/home", "/dev", "/proc", "/sys", "/run")
LAYOUTS = {
    # SWE-bench's published images: lowercase, "__" written "_1776_" (Docker Hub refuses it).
    "swebench": "swebench/sweb.eval.x86_64.{swebench_id}:latest",
    # Epoch AI's registry of the same images.
    "epoch": "ghcr.io/epoch-research/swe-bench.eval.x86_64.{instance_id}:latest",
}
PLACEHOLDERS = ("instance_id", "swebench_id", "repo", "version")
# A Docker image reference: [host[:port]/]path[:tag][@sha256:digest], matched whole.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE_RE = re.compile(
    r"\A(?:(?P<host>[A-Za-z0-9.-]+(?::[0-9]+)?)/)?"
    rf"(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?\Z"
)
_PATH_ENTRY_RE = re.compile(r"\A/[A-Za-z0-9._+/-]*\Z")
_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")


def reference_of(template: str, instance_id: str, repo: str, version: str) -> str:
    """The image reference ``template`` (or a layout's name, ``LAYOUTS``) names for one
    instance; one line naming the template when it is not a reference."""
    text = LAYOUTS.get(template, template)
    values = {
        "instance_id": instance_id.lower(),
        "swebench_id": instance_id.lower().replace("__", "_1776_"),
        "repo": repo.lower(),
        "version": version,
    }
    unknown = sorted({m for m in _PLACEHOLDER_RE.findall(text) if m not in values})
    if unknown:
        raise UserError(
            f"--instance-image {template!r}: unknown placeholder {{{unknown[0]}}}; use "
            + ", ".join("{" + name + "}" for name in PLACEHOLDERS)
        )
    reference = _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], text)
    if not REFERENCE_RE.fullmatch(reference):
        raise UserError(
            f"--instance-image {template!r}: {reference!r} (instance {instance_id}) is not an "
            "image reference ([host/]name[:tag][@sha256:digest], lowercase name)"
        )
    return reference


def digest_of(reference: str) -> str | None:
    """The ``sha256:…`` a reference pins, if any."""
    match = REFERENCE_RE.fullmatch(reference)
    return match.group("digest") if match else None


def environment_path(image_path: str, has_swebench_env: bool) -> tuple[str, ...]:
    """The directories of an image's environment, in order: SWE-bench's conda environment
    when the image has one there (its ``bin/python``), then what its ``ENV PATH`` adds to a
    standard one, less those no sandbox may have on its PATH (``left_out``)."""
    found: list[str] = [f"{SWEBENCH_ENV}/bin"] if has_swebench_env else []
    for entry in (_normal(e) for e in image_path.split(":") if e):
        if entry not in STANDARD_PATH and entry not in found and not _unsafe(entry):
            found.append(entry)
    return tuple(found)


def left_out(image_path: str) -> tuple[str, ...]:
    """The entries of an image's ``ENV PATH`` that ``environment_path`` leaves out: relative,
    not normalised, or where a sandbox writes."""
    return tuple(e for e in image_path.split(":") if e and _unsafe(_normal(e)))


def _normal(entry: str) -> str:
    """An absolute entry normalised (``/opt/env/bin/`` is ``/opt/env/bin``)."""
    return posixpath.normpath(entry) if entry.startswith("/") else entry


def _unsafe(entry: str) -> bool:
    return (
        not _PATH_ENTRY_RE.fullmatch(entry)
        or posixpath.normpath(entry) != entry
        or any(entry == w or entry.startswith(w + "/") for w in WRITABLE)
    )


def check_path(entries: list[str] | tuple[str, ...], where: str) -> list[str]:
    """Each entry an absolute, normalised directory outside every place a sandbox may
    write (``WRITABLE``); one line naming the first that is not."""
    for entry in entries:
        if _unsafe(entry):
            raise UserError(
                f"{where}: {entry!r} cannot be on a sandbox's PATH (an absolute, normalised "
                f"directory outside {', '.join(WRITABLE)})"
            )
    return list(entries)


def path_of_label(value: str | None, repo: str | None = None) -> tuple[str, ...]:
    """The directories an image's ``deltarun.path`` label puts first on PATH (none when it
    has no label); the repository's path (a link to the workspace) is refused too."""
    if not value:
        return ()
    entries = value.split(":")
    check_path(entries, f"label {PATH_LABEL}")
    if repo:
        for entry in entries:
            if entry == repo or entry.startswith(repo.rstrip("/") + "/"):
                raise UserError(
                    f"label {PATH_LABEL}: {entry!r} is under the repository's path {repo}, "
                    "a link to the workspace"
                )
    return tuple(entries)


def with_path(env_path: str, prefix: tuple[str, ...]) -> str:
    """``PATH`` with the image's environment first."""
    if not prefix:
        return env_path
    return ":".join([*prefix, *(e for e in env_path.split(":") if e not in prefix)])


def check_repo_path(repo: str) -> str:
    if (
        not _PATH_ENTRY_RE.fullmatch(repo)
        or posixpath.normpath(repo) != repo
        or repo == "/"
        or any(repo == w or repo.startswith(w + "/") for w in WRITABLE if w != WORKSPACE)
    ):
        raise UserError(f"instance image: {repo!r} is not a repository path (e.g. /testbed)")
    return repo


def adapter_dockerfile(source_id: str, reference: str, repo: str, path: tuple[str, ...]) -> str:
    """deltarun's layer over the image ``source_id`` (see the module docstring)."""
    check_repo_path(repo)
    check_path(path, "the image's environment")
    quoted = shlex.quote(repo)
    link = [f"rm -rf {quoted}", f'mkdir -p "$(dirname {quoted})"', f"ln -s {WORKSPACE} {quoted}"]
    if repo == WORKSPACE:
        link = []
    steps = [
        "set -eu",
        f"test -d {quoted} || {{ echo 'deltarun: the image has no '{quoted} >&2; exit 1; }}",
        # The agent user, uid and gid 1000, whatever the image has (useradd may be absent).
        'for f in /etc/passwd /etc/group; do awk -F: \'$1 != "agent" && $3 != 1000\' "$f" '
        '> /tmp/deltarun-ids && cat /tmp/deltarun-ids > "$f"; done',
        "rm -f /tmp/deltarun-ids",
        "shell=/bin/sh; [ -x /bin/bash ] && shell=/bin/bash",
        'echo "agent:x:1000:1000:deltarun agent:/home/agent:$shell" >> /etc/passwd',
        "echo 'agent:x:1000:' >> /etc/group",
        f"mkdir -p {WORKSPACE} {IO_DIR} {AGENT_DIR} {BASELINE_DIR} /home/agent",
        f"chown 1000:1000 {WORKSPACE} {IO_DIR} /home/agent",
        f"chmod 0700 {BASELINE_DIR}",
        *link,
        # No setuid or setgid file: nothing in a sandbox may raise its privileges.
        "find / -xdev -perm /6000 -type f -exec chmod ug-s {} + 2>/dev/null || true",
    ]
    labels = {
        PATH_LABEL: ":".join(path),
        REPO_LABEL: repo,
        SOURCE_LABEL: source_id,
        REFERENCE_LABEL: reference,
    }
    label_line = " ".join(f"{k}={_quoted(v)}" for k, v in labels.items())
    return (
        "\n".join(
            [
                f"FROM {source_id}",
                "USER root",
                "RUN " + "; \\\n    ".join(steps),
                "ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/home/agent LANG=C.UTF-8",
                f"LABEL {label_line}",
                # The sandbox starts its own command: no entrypoint of the image's wraps it.
                "ENTRYPOINT []",
                'CMD ["/bin/sh"]',
                f"WORKDIR {WORKSPACE}",
                "USER agent",
            ]
        )
        + "\n"
    )


def adapted_tag(instance_id: str, dockerfile: str) -> str:
    """The local tag of an adapted image: named by the instance and its layer's text (which
    holds the source image's ID), so the same image and layer give the same tag."""
    name = re.sub(r"[^a-z0-9._-]+", "-", instance_id.lower()).strip("-._")[:100] or "instance"
    name = re.sub(r"[._-]{2,}", "-", name)
    digest = hashlib.sha256(dockerfile.encode("utf-8")).hexdigest()[:16]
    return f"{TAG_PREFIX}/{name}:{digest}"


def _quoted(value: str) -> str:
    """A LABEL value as Docker reads it back: double-quoted, backslash escapes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
