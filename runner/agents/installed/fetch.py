"""Fetching an installed agent on the coordinator, with the user's own package clients.

``npm pack`` and ``pip download`` run on this machine, so a proxy, a private index or an
offline cache configured for them just works; nothing in a sandbox or an image build
reaches a network. What they fetch becomes one install tree:

    npm    each tarball's listed members (regular files only, checked one by one)
           under ``bin/`` …
    PyPI   wheels resolved for the target image's Python (its version, CPython ABI and
           glibc's manylinux tags), installed by pip into a flat ``site/`` directory

The tree and a manifest (every artifact's file name and SHA-256, and their combined
digest, the ``artifacts_sha256`` the controls pin) are kept in the cache under
``agents/<name>/<version>/<python>/`` and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.agents.installed.kind import Artifact, Kind
from runner.errors import DigestMismatch, UsageError, UserError
from runner.hashing import sha256_file, sha256_json
from runner.trees.cache import default_root

FETCH_TIMEOUT_S = 1800.0
MAX_MEMBER_BYTES = 1 << 30
MANIFEST = "manifest.json"
# What npm and pip say when the registry has no such version (or no such package).
_NOT_FOUND = (
    "No matching version found",  # npm ETARGET
    "E404",  # npm: no such package
    "No matching distribution found",  # pip
    "Could not find a version that satisfies",  # pip
)
# manylinux tags a wheel may carry to run on glibc 2.<minor> (x86_64).
_LEGACY_TAGS = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}


class UnknownVersion(UsageError):
    """The registry has no artifact for the agent's version (exit 2, like any bad field)."""


@dataclass(frozen=True)
class Target:
    """What the wheels are resolved for: the image's Python (None: no Python needed)."""

    python: tuple[int, int] | None
    glibc: tuple[int, int] | None

    @property
    def key(self) -> str:
        return f"py{self.python[0]}.{self.python[1]}" if self.python else "any"


@dataclass(frozen=True)
class Fetched:
    """An agent's install tree on this machine, with what it was made from."""

    name: str
    version: str
    tree: Path  # holds bin/ and/or site/, laid out as under INSTALL_DIR
    files: tuple[tuple[str, str], ...]  # (artifact file name, SHA-256), sorted

    @property
    def sha256(self) -> str:
        return artifacts_digest(self.files)


def artifacts_digest(files: Sequence[tuple[str, str]]) -> str:
    """The digest the controls pin: canonical JSON of every (file name, SHA-256)."""
    return sha256_json([list(pair) for pair in sorted(files)])


def fetch(
    kind: Kind,
    version: str,
    target: Target,
    say: Callable[[str], None],
    root: Path | None = None,
) -> Fetched:
    """The install tree of ``kind`` at ``version`` for ``target``, fetched once."""
    home = (root or default_root() / "agents") / kind.name / version / target.key
    manifest = home / MANIFEST
    if manifest.is_file():
        listed = json.loads(manifest.read_text())["files"]
        pairs = tuple((str(name), str(digest)) for name, digest in listed)
        return Fetched(kind.name, version, home / "tree", pairs)
    home.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".part-", dir=home.parent))
    try:
        files: list[tuple[str, str]] = []
        for artifact in kind.artifacts(version):
            say(f"fetching {artifact.spec} ({artifact.registry})")
            if artifact.registry == "npm":
                files += _npm(artifact, work, kind.name)
            else:
                files += _pypi(artifact, work, target, kind.name)
        files.sort()
        for scratch in ("npm", "wheels"):  # their digests are kept; the tree is what runs
            shutil.rmtree(work / scratch, ignore_errors=True)
        (work / MANIFEST).write_text(json.dumps({"files": files}, indent=1))
        try:
            os.rename(work, home)
        except OSError:  # another process fetched it first: keep theirs
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return fetch(kind, version, target, say, root)


def check_pin(fetched: Fetched, pinned: str, where: str) -> None:
    """A pinned ``artifacts_sha256`` must be what was fetched (exit 3 otherwise)."""
    if pinned and pinned != fetched.sha256:
        raise DigestMismatch(
            f"{where}: {fetched.name} {fetched.version}: the fetched artifacts hash to "
            f"{fetched.sha256}, the controls pin {pinned}; a registry served other files: "
            "check them, then run `deltarun build` to pin the new digest"
        )


def _run(argv: list[str], what: str, agent: str) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
        )
    except FileNotFoundError as exc:
        raise UserError(
            f"installing {agent} needs {argv[0]} on this machine (the coordinator fetches "
            f"its artifacts); install it or put it on PATH"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"{what} took over {FETCH_TIMEOUT_S:.0f}s; check the registry") from exc
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        for line in lines:
            if any(marker in line for marker in _NOT_FOUND):
                raise UnknownVersion(f"{what}: the registry says {line[:200]!r}")
        tail = lines[-1:] or ["no output"]
        raise UserError(f"{what} failed: {tail[0][:300]}")
    return done.stdout


def _npm(artifact: Artifact, work: Path, agent: str) -> list[tuple[str, str]]:
    packs = work / "npm"
    packs.mkdir(exist_ok=True)
    out = _run(
        ["npm", "pack", artifact.spec, "--pack-destination", str(packs), "--json"],
        f"npm pack {artifact.spec}",
        agent,
    )
    try:
        filename = json.loads(out)[0]["filename"]
    except (ValueError, LookupError, TypeError) as exc:
        raise UserError(f"npm pack {artifact.spec}: unexpected output; is npm ≥ 7?") from exc
    tarball = packs / Path(filename).name
    _unpack_members(tarball, artifact, work / "tree")
    return [(tarball.name, sha256_file(tarball))]


def _unpack_members(tarball: Path, artifact: Artifact, tree: Path) -> None:
    """The listed members only, as regular files (a link or device is refused)."""
    wanted = dict(artifact.members)
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            dest = wanted.pop(member.name, None)
            if dest is None:
                continue
            if not member.isreg() or member.size > MAX_MEMBER_BYTES:
                raise UserError(f"{artifact.spec}: {member.name} is not a regular file")
            source = archive.extractfile(member)
            assert source is not None
            path = tree / dest
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            path.chmod(0o755)
    if wanted:
        raise UserError(
            f"{artifact.spec}: the package has no {sorted(wanted)[0]}; this version's layout "
            "differs from the catalogue's (pick another version)"
        )


def platform_flags(target: Target) -> list[str]:
    """pip's flags for wheels that run on the target image's CPython and glibc."""
    assert target.python is not None
    major, minor = target.python
    flags = [
        "--only-binary=:all:",
        "--python-version", f"{major}.{minor}",
        "--implementation", "cp",
        "--abi", f"cp{major}{minor}",
        "--abi", "abi3",
        "--abi", "none",
    ]  # fmt: skip
    glibc_minor = target.glibc[1] if target.glibc else 17
    for tag_minor in range(5, glibc_minor + 1):
        flags += ["--platform", f"manylinux_2_{tag_minor}_x86_64"]
        if tag_minor in _LEGACY_TAGS:
            flags += ["--platform", f"{_LEGACY_TAGS[tag_minor]}_x86_64"]
    return [*flags, "--platform", "any"]


def _pypi(artifact: Artifact, work: Path, target: Target, agent: str) -> list[tuple[str, str]]:
    if target.python is None:
        raise UserError(f"{agent} is a Python program: the image needs python3 ≥ 3.10")
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    flags = platform_flags(target)
    where = f"{agent} for Python {target.python[0]}.{target.python[1]}"
    _run([*pip, "download", "-d", str(wheels), *flags, artifact.spec], f"fetching {where}", agent)
    _run(
        [
            *pip, "install", "--no-index", "--find-links", str(wheels), "--no-compile",
            "--target", str(work / "tree" / "site"), *flags, artifact.spec,
        ],
        f"installing {where}",
        agent,
    )  # fmt: skip
    return [(path.name, sha256_file(path)) for path in sorted(wheels.iterdir())]
