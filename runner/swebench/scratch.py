"""A scratch git directory over a local clone, for ``deltarun import swebench``: the tree
at an instance's base commit, a parentless fixture commit per tree (fixed identity and
dates, so the same trees give the same bytes), the hidden files after ``test_patch``, and
one bundle per repository. Git runs with no hooks, no system or global config and no
prompts."""

from __future__ import annotations

import os
import posixpath
import subprocess
import tempfile
from collections.abc import Callable, Sequence
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
_LINK, _GITLINK, _TREE = "120000", "160000", "040000"
_LINK_DEPTH = 8  # a link naming a link, at most this deep
_LINK_BYTES = 4096  # a link's target is a path: a longer blob names nothing
_LINKED_ENTRIES = 200_000  # files that links to directories may add to one tree


class Scratch:
    """A scratch bare repository borrowing a clone's objects (alternates): the fixture
    commits and the test patch's index live here, never in the user's clone."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.refs: dict[str, str] = {}
        self.replaced: set[str] = set()  # links of the base trees, by what they name
        self.left_out: set[str] = set()  # links naming nothing in the tree, submodules

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

    def fixture_tree(self, instance: Instance) -> str:
        """The tree of the instance's fixture: its base commit's, as a fixture can hold it
        (``without_links``; what changed is kept for ``say_links``)."""
        tree, replaced, left_out = self.without_links(self.tree_of(instance))
        self.replaced.update(replaced)
        self.left_out.update(left_out)
        return tree

    def say_links(self, repo: str, say: Callable[[str], None]) -> None:
        """One warning each for the links replaced and the paths left out, over every base
        tree read so far."""
        for paths, what in (
            (self.replaced, "replaced by what they name in the tree (a fixture holds no links)"),
            (self.left_out, "left out: links that name nothing inside the tree, and submodules"),
        ):
            if paths:
                first = ", ".join(sorted(paths)[:3]) + (", ..." if len(paths) > 3 else "")
                say(f"warning: {repo}: {len(paths)} paths of its base commits {what}: {first}")

    def without_links(self, tree: str) -> tuple[str, list[str], list[str]]:
        """``tree`` as a fixture can hold it (regular files and directories only), with the
        links replaced and the left out paths: each symbolic link becomes what it names
        inside the tree (a file's blob, or a directory's tree without links of its own:
        git shares the objects, nothing is copied); a link that names nothing there (an
        absolute path, a path out of the tree, a missing one, a cycle) and a submodule
        (its commit is not in the repository) are left out. ``tree`` itself when it has
        neither."""
        entries = self._entries(tree)
        odd = sorted(p for p, (mode, _) in entries.items() if mode in (_LINK, _GITLINK))
        if not odd:
            return tree, [], []
        lines, replaced, left_out = [], [], []
        for path in odd:
            lines.append(f"0 {'0' * 40}\t{path}")  # mode 0: take the entry out
            found = self._named(tree, path, entries) if entries[path][0] == _LINK else None
            if found is None:
                left_out.append(path)
                continue
            replaced.append(path)
            mode, sha = found
            if mode != _TREE:
                lines.append(f"{mode} {sha}\t{path}")
                continue
            for sub, (sub_mode, sub_sha) in self._entries(sha).items():
                lines.append(f"{sub_mode} {sub_sha}\t{path}/{sub}")
            if len(lines) > _LINKED_ENTRIES:
                raise UserError(
                    f"tree {tree} of {self.clone}: its links to directories name more than "
                    f"{_LINKED_ENTRIES:,} files; a fixture holds no links: remove them"
                )
        index = self.dir / "links.index"
        env = {"GIT_INDEX_FILE": str(index)}
        self._run(["read-tree", tree], env=env)
        data = "".join(line + "\0" for line in lines).encode("utf-8", "surrogateescape")
        self._run(["update-index", "-z", "--index-info"], stdin=data, env=env)
        new = self._run(["write-tree"], env=env).decode().strip()
        index.unlink(missing_ok=True)
        return new, replaced, left_out

    def _entries(self, tree: str) -> dict[str, tuple[str, str]]:
        """Every blob, link and submodule of ``tree``, recursively: path -> (mode, id)."""
        listing = self._run(["ls-tree", "-r", "-z", tree]).split(b"\0")
        found = {}
        for entry in listing:
            if entry:
                meta, _, raw = entry.partition(b"\t")
                mode, _kind, sha = meta.decode().split()
                found[raw.decode("utf-8", "surrogateescape")] = (mode, sha)
        return found

    def _named(
        self, tree: str, path: str, entries: dict[str, tuple[str, str]]
    ) -> tuple[str, str] | None:
        """What the link at ``path`` names inside ``tree``, following links: a file's (mode,
        blob) or a link-free directory's (040000, tree); None when it names nothing there."""
        for _ in range(_LINK_DEPTH):
            blob = entries[path][1]
            if int(self._run(["cat-file", "-s", blob]).decode().strip() or 0) > _LINK_BYTES:
                return None
            target = self._run(["cat-file", "blob", blob])
            name = target.decode("utf-8", "surrogateescape")
            if not name or name.startswith("/") or "\0" in name:
                return None
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), name))
            if path in (".", "..") or path.startswith("../"):
                return None
            mode, sha = entries.get(path, ("", ""))
            if mode == _LINK:
                continue
            if mode:
                return (mode, sha) if mode != _GITLINK else None
            listed = self._run(["ls-tree", "-z", tree, "--", path]).split(b"\0")[0]
            meta = listed.partition(b"\t")[0].decode().split()
            if len(meta) != 3 or meta[0] != _TREE:
                return None  # missing
            inner = self._entries(meta[2])
            if any(m in (_LINK, _GITLINK) for m, _ in inner.values()):
                return None  # a directory holding links (its own, or one that contains it)
            return _TREE, meta[2]
        return None

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
