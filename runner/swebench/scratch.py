"""A scratch git directory over a local clone, for ``deltarun import swebench``: the tree
at an instance's base commit, a parentless fixture commit per tree (fixed identity and
dates, so the same trees give the same bytes), the hidden files after ``test_patch``, and
one bundle per repository. Git runs with no hooks, no system or global config and no
prompts."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from runner.errors import UserError
from runner.gitpatch import PatchError, touched_paths
from runner.swebench.instances import Instance
from runner.trees.archives import Member

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


class Scratch:
    """A scratch bare repository borrowing a clone's objects (alternates): the fixture
    commits and the test patch's index live here, never in the user's clone."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.refs: dict[str, str] = {}

    def __enter__(self) -> Scratch:
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
