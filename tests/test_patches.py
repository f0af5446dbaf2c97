"""Patch parsing: paths touched and forbidden chunks dropped."""

from runner.patches import drop_forbidden, drop_protected, patch_paths, split_files

PATCH = (
    "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-a\n+b\n"
    "diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit\nnew file mode 100755\n"
    "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+evil\n"
    "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
)


def test_split_and_paths() -> None:
    assert len(split_files(PATCH)) == 3
    assert patch_paths(PATCH) == {"src/a.py", ".git/hooks/pre-commit", "old.py", "new.py"}


def test_drop_forbidden_keeps_the_rest() -> None:
    kept, dropped = drop_forbidden(PATCH, [".git/"])
    assert dropped == [".git/hooks/pre-commit"]
    assert "evil" not in kept and "+b\n" in kept and "rename to new.py" in kept
    assert drop_forbidden(PATCH, []) == (PATCH, [])
    _, renamed = drop_forbidden(PATCH, ["new.py"])
    assert renamed == ["new.py"]


def test_drop_protected_guards_hidden_paths_and_their_parents() -> None:
    patch = (
        "diff --git a/tests/test_hidden.py b/tests/test_hidden.py\n--- a/tests/test_hidden.py\n"
        "+++ b/tests/test_hidden.py\n@@ -1 +1 @@\n-x\n+def test_x(): pass\n"
        "diff --git a/tests b/tests\nnew file mode 100644\n--- /dev/null\n+++ b/tests\n@@ -0,0 +1 @@\n+x\n"
        "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    kept, dropped = drop_protected(patch, {"tests/test_hidden.py"})
    assert sorted(dropped) == ["tests", "tests/test_hidden.py"]
    assert kept.startswith("diff --git a/src/a.py") and "test_x" not in kept
