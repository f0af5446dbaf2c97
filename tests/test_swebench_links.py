"""Real repositories carry symbolic links and submodules (pylint's tree has links among its
test data at many base commits), and a fixture holds regular files and directories only.
The import replaces each link by what it names inside the tree (git shares the objects) and
leaves out a link that names nothing there and a submodule, with one warning line each per
repository; the suite then seals and its instances run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runner.swebench.scratch import Scratch
from runner.trees.gitfixture import git as run_git
from tests.conftest import run_cli
from tests.test_gitfixture import sh_git

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def linked_repository(repo: Path) -> str:
    """A repository whose base commit holds every kind of link and a submodule; its id."""
    files = {
        "calc/__init__.py": BUGGY,
        "data/real.txt": "the data\n",
        "data/sub/inner.txt": "inner\n",
        "tests/__init__.py": "",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    links = {
        "data/alias.txt": "real.txt",  # a file, beside it
        "docs/chain.txt": "../data/alias.txt",  # a link to a link
        "datalink": "data/sub",  # a directory without links
        "out.txt": "../../etc/passwd",  # out of the tree
        "abs.txt": "/etc/passwd",  # absolute
        "dangling.txt": "nowhere.txt",  # names nothing
        "data/up": "..",  # a directory holding links (the root, holding itself)
    }
    for name, target in links.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, repo / name)
    sh_git(repo, "init", "-q")
    sh_git(repo, "add", "-A")
    # A submodule: a commit id the repository does not hold, as a checkout without it has.
    sh_git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'ab' * 20},vendor/lib")
    # A "link" longer than any path (only git's plumbing writes one) names nothing.
    (tmp := repo / ".long").write_text("./" * 2500 + "data/real.txt")  # names a file
    blob = sh_git(repo, "hash-object", "-w", str(tmp))
    tmp.unlink()
    sh_git(repo, "update-index", "--add", "--cacheinfo", f"120000,{blob},long.txt")
    sh_git(repo, "commit", "-q", "-m", "base")
    return sh_git(repo, "rev-parse", "HEAD")


def test_links_are_replaced_by_what_they_name_or_left_out(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    commit = linked_repository(repo)
    with Scratch(repo) as scratch:
        base = sh_git(repo, "rev-parse", f"{commit}^{{tree}}")
        tree, replaced, left_out = scratch.without_links(base)
        listing = run_git(["ls-tree", "-r", "-z", tree], scratch.dir).split(b"\0")
        again = scratch.without_links(tree)  # a tree without links is the tree itself
    assert again == (tree, [], [])
    entries = {}
    for entry in filter(None, listing):
        meta, _, path = entry.partition(b"\t")
        mode, _kind, sha = meta.decode().split()
        entries[path.decode()] = (mode, sha)
    assert sorted(replaced) == ["data/alias.txt", "datalink", "docs/chain.txt"]
    assert sorted(left_out) == [
        "abs.txt", "dangling.txt", "data/up", "long.txt", "out.txt", "vendor/lib"
    ]  # fmt: skip
    assert entries["data/alias.txt"] == entries["docs/chain.txt"] == entries["data/real.txt"]
    assert entries["datalink/inner.txt"] == entries["data/sub/inner.txt"]
    assert {mode for mode, _ in entries.values()} == {"100644"}
    for gone in left_out:
        assert not [p for p in entries if p == gone or p.startswith(gone + "/")], gone


@pytest.mark.docker
def test_an_instance_of_a_repository_with_links_imports_seals_and_validates(
    tmp_path: Path, docker_api: object
) -> None:
    repos = tmp_path / "repos"
    repo = repos / "acme__linked"
    repo.mkdir(parents=True)
    commit = linked_repository(repo)
    test = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    test_patch = (
        "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n"
        + "".join(f"+{line}\n" for line in test.splitlines())
    )
    patch = (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n"
        "+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n"
        "+    return a + b\n"
    )
    instance = {
        "repo": "acme/linked",
        "instance_id": "acme__linked-1",
        "base_commit": commit,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "add() subtracts",
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["tests/test_add.py::test_add"]),
        "PASS_TO_PASS": "[]",
    }
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(instance) + "\n")
    out = tmp_path / "suite"
    made = run_cli("import", "swebench", str(instances), "--repos", str(repos), "--out", str(out))
    assert made.returncode == 0, made.stderr
    warnings = [line for line in made.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: acme/linked: 3 paths of its base commits replaced by what they name in the "
        "tree (a fixture holds no links): data/alias.txt, datalink, docs/chain.txt",
        "warning: acme/linked: 6 paths of its base commits left out: links that name nothing "
        "inside the tree, and submodules: abs.txt, dangling.txt, data/up, ...",
    ], made.stderr
    checked = run_cli("validate", str(out / "controls.yaml"))
    document = json.loads((out / "suite" / "validation.json").read_text())
    (found,) = document["tasks"]
    assert found["verdict"] == "valid", (found, checked.stderr)


def test_links_to_directories_are_bounded_before_the_tree_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Directory links can name the same files many times over: past a bound (200,000
    files; 3 here) the import stops in one line instead of building the tree."""
    import runner.swebench.scratch as scratch_module
    from runner.errors import UserError

    repo = tmp_path / "repo"
    repo.mkdir()
    commit = linked_repository(repo)
    monkeypatch.setattr(scratch_module, "_LINKED_ENTRIES", 3)
    with Scratch(repo) as scratch, pytest.raises(UserError) as info:
        scratch.without_links(sh_git(repo, "rev-parse", f"{commit}^{{tree}}"))
    assert "its links to directories name more than 3 files" in str(info.value)
