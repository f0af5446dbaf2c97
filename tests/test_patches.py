"""Patch parsing: paths touched and forbidden chunks dropped."""

from runner.patches import drop_forbidden, patch_paths, split_files

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
