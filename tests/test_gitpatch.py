"""The patch reader against git itself: ``git apply --numstat -z`` is the oracle.

Patches are made by real ``git diff --binary`` runs over generated trees with
hostile names and contents (spaces, tabs, quotes, newlines, bytes that are not
UTF-8, lines holding ``\\r``, ``\\x0b`` or ``\\x85`` and fake headers), then
read by ``runner.gitpatch`` and by git; both must name the same files.
"""

from __future__ import annotations

import os
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import gitpatch
from runner.gitpatch import PatchError

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["git", "-c", "core.protectNTFS=false", *args],
        cwd=repo,
        input=stdin,
        capture_output=True,
        env=GIT_ENV,
        check=True,
    )
    return done.stdout


def numstat_paths(repo: Path, patch: bytes) -> list[str]:
    """The file each section of the patch leaves (git apply names a rename by its new path)."""
    if not patch:
        return []
    out = git(repo, "apply", "--numstat", "-z", "-", stdin=patch)
    fields = out.split(b"\0")
    paths: list[str] = []
    index = 0
    while index < len(fields) and fields[index]:
        head = fields[index]
        parts = head.split(b"\t", 2)
        paths.append(parts[2].decode("utf-8", "surrogateescape"))
        index += 1
    return paths


def result_paths(files: list[gitpatch.FileDiff]) -> list[str]:
    """What each section leaves behind: the new path, or the old one of a deletion."""
    return [f.new_path or f.old_path or "" for f in files]


def make_repo(root: Path, files: dict[bytes, bytes]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base")
    return repo


def write(repo: Path, files: dict[bytes, bytes | None]) -> None:
    base = os.fsencode(repo)
    for name, data in files.items():
        path = os.path.join(base, name)
        if data is None:
            if os.path.lexists(path):
                os.unlink(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


def diff(repo: Path, *extra: str) -> bytes:
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary", "--no-color", *extra, "HEAD")


NAMES = [
    b"plain.py",
    b"dir/mod.py",
    b"a b.py",
    b"q b/c.py",
    b"tab\there.py",
    b'quote"d.py',
    b"new\nline.py",
    b"bad\xffutf.py",
    b"caf\xc3\xa9/x.py",
    b"back\\slash.py",
    b"diff --git a/x b/x",
]
CONTENTS = [
    b"x\n",
    b"",
    b"no newline",
    b"\x00\x01\x02binary",
    b"+++ b/conftest.py\n--- a/conftest.py\n",
    b"line\x85diff --git a/conftest.py b/conftest.py\n",
    b"cr\rdiff --git a/evil.py b/evil.py\rmore\n",
    b"vt\x0b@@ -1 +1 @@\x0c\n",
    b"\n\n\n",
    b"".join(b"%d\n" % i for i in range(50)),
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(CONTENTS), max_size=5),
    after=st.dictionaries(
        st.sampled_from(NAMES), st.none() | st.sampled_from(CONTENTS), max_size=5
    ),
)
def test_parse_names_the_files_git_apply_touches(
    tmp_path_factory: pytest.TempPathFactory,
    before: dict[bytes, bytes],
    after: dict[bytes, bytes | None],
) -> None:
    root = tmp_path_factory.mktemp("p")
    repo = make_repo(root, before)
    write(repo, after)
    patch = diff(repo, "--no-renames")
    files = gitpatch.parse(patch)
    ours = [p for f in files for p in f.paths]
    assert result_paths(files) == numstat_paths(repo, patch)
    assert gitpatch.touched_paths(patch) == list(dict.fromkeys(ours))
    assert gitpatch.keep(patch, files, lambda f: True) == patch
    # Every subset of sections is itself a patch git reads, touching exactly those files.
    for drop in range(len(files)):
        subset = gitpatch.keep(patch, files, lambda f, d=files[drop]: f is not d)
        kept = [f for f in files if f is not files[drop]]
        assert numstat_paths(repo, subset) == result_paths(kept)


def test_renames_copies_modes_and_symlinks(tmp_path: Path) -> None:
    body = b"".join(b"line %d\n" % i for i in range(30))
    repo = make_repo(tmp_path, {b"old name.py": body, b"keep.py": b"k\n", b"mode.sh": b"m\n"})
    write(repo, {b"old name.py": None, b"new name.py": body + b"x\n", b"c.py": body})
    os.chmod(repo / "mode.sh", 0o755)
    os.symlink("/etc/passwd", repo / "link")
    patch = diff(repo, "-M", "-C", "--find-copies-harder")
    files = gitpatch.parse(patch)
    assert result_paths(files) == numstat_paths(repo, patch)
    copied = next(f for f in files if f.new_path == "c.py")
    assert copied.old_path == "old name.py"
    renamed = next(f for f in files if f.new_path == "new name.py")
    assert renamed.old_path == "old name.py"
    link = next(f for f in files if f.new_path == "link")
    assert link.is_symlink and link.old_path is None
    mode = next(f for f in files if f.new_path == "mode.sh")
    assert (mode.old_mode, mode.new_mode) == ("100644", "100755")


def test_a_deleted_file_has_no_new_path(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {b"gone.py": b"x\n"})
    write(repo, {b"gone.py": None})
    (file,) = gitpatch.parse(diff(repo))
    assert file.deletes and file.old_path == "gone.py" and file.new_path is None


SMUGGLED = (
    b"diff --git a/calc.py b/calc.py\n"
    b"--- a/calc.py\n"
    b"+++ b/calc.py\n"
    b"@@ -1 +1 @@\n"
    b"-x\n"
    b"+y\n"
    b"--- /dev/null\n"
    b"+++ b/conftest.py\n"
    b"@@ -0,0 +1 @@\n"
    b"+evil\n"
)


def test_a_traditional_section_after_a_hunk_is_seen_as_git_sees_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {b"calc.py": b"x\n"})
    assert numstat_paths(repo, SMUGGLED) == ["calc.py", "conftest.py"]
    assert gitpatch.touched_paths(SMUGGLED) == ["calc.py", "conftest.py"]
    with pytest.raises(PatchError, match="expected 'diff --git'"):
        gitpatch.parse(SMUGGLED)  # git diff never writes that: the strict reader refuses it


@pytest.mark.parametrize(
    "patch",
    [
        b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n",  # too few lines
        b"@@ -1 +1 @@\n-a\n+b\n",  # a hunk without a header
        b"garbage\n",
        b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b",  # no final newline
        b"diff --git a/x b/x\nnew file mode 100644\nGIT binary patch\nliteral 2\nJcmZQ\n\n",
        b'diff --git "a/x\\q" "b/x\\q"\nnew file mode 100644\n',
    ],
)
def test_what_git_diff_does_not_write_is_refused(patch: bytes) -> None:
    with pytest.raises(PatchError):
        gitpatch.parse(patch)


def test_hostile_content_lines_do_not_split_sections(tmp_path: Path) -> None:
    content = b"".join(
        [
            b"a\x85diff --git a/conftest.py b/conftest.py\n",
            b"b\rdiff --git a/pytest.ini b/pytest.ini\r\n",
            b"c\x0b\x0c\x1c\x1d\x1e" + "\u2028".encode() + b"\n",
        ]
    )
    repo = make_repo(tmp_path, {b"m.py": b"x\n"})
    write(repo, {b"m.py": content})
    patch = diff(repo)
    (file,) = gitpatch.parse(patch)
    assert file.paths == ("m.py",)


def test_two_byte_lines_are_read_in_memory_proportional_to_the_patch() -> None:
    lines = 2_000_000
    patch = (
        b"diff --git a/big b/big\nnew file mode 100644\nindex 0000000..1111111\n"
        b"--- /dev/null\n+++ b/big\n" + b"@@ -0,0 +1,%d @@\n" % lines + b"+a\n" * lines
    )
    tracemalloc.start()
    try:
        files = gitpatch.parse(patch)
        kept = gitpatch.keep(patch, files, lambda f: True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert files[0].end == len(patch) and kept == patch
    assert peak < 3 * len(patch), f"peak {peak} bytes for a {len(patch)}-byte patch"


def test_unquote_follows_git() -> None:
    assert gitpatch.unquote(b'"a/t\\303\\251st\\n\\t\\"\\\\"') == 'a/tést\n\t"\\'.encode()
    with pytest.raises(PatchError):
        gitpatch.unquote(b'"a/\\9"')
