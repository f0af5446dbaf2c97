import pytest

from globmatch import match, select


@pytest.mark.parametrize(
    "pattern,path,expected",
    [
        ("src/*.py", "src/app.py", True),
        ("src/*.py", "src/pkg/app.py", False),
        ("*.md", "README.md", True),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("log[0-9].txt", "log7.txt", True),
        ("log[!0-9].txt", "logx.txt", True),
        ("log[!0-9].txt", "log7.txt", False),
        ("a.b", "axb", False),
        ("docs/**", "docs/api/index.md", True),
        ("src/**/*.py", "src/pkg/app.py", True),
    ],
)
def test_match(pattern, path, expected):
    assert match(pattern, path) is expected


def test_select_with_exclusion():
    paths = ["src/a/main.py", "src/a/test_main.py", "README.md"]
    assert select(["src/**/*.py", "!src/**/test_*.py"], paths) == ["src/a/main.py"]
