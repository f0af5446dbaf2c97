import pytest

from globmatch import match, select


@pytest.mark.parametrize(
    "pattern,path,expected",
    [
        # "**/" may match zero directories ...
        ("src/**/*.py", "src/app.py", True),
        ("**/conftest.py", "conftest.py", True),
        ("a/**/b", "a/b", True),
        # ... or several
        ("src/**/*.py", "src/a/b/c/app.py", True),
        ("**/conftest.py", "tests/unit/conftest.py", True),
        ("a/**/b", "a/x/y/b", True),
        # but only whole segments
        ("**/conftest.py", "tests/myconftest.py", False),
        ("a/**/b", "a/xb", False),
        ("a/**/b", "ab", False),
        ("src/**/*.py", "srcx/app.py", False),
        ("src/**/*.py", "lib/src/app.py", False),
        ("src/**/*.py", "src/app.txt", False),
        # trailing "/**" matches everything below the directory
        ("docs/**", "docs/index.md", True),
        ("docs/**", "docs/api/v1/index.md", True),
        ("docs/**", "docsite/index.md", False),
        # a lone "**" matches every path
        ("**", "a/b/c.txt", True),
        # single "*" still stops at "/"
        ("src/*.py", "src/pkg/app.py", False),
        ("*/test_*.py", "tests/unit/test_a.py", False),
    ],
)
def test_doublestar(pattern, path, expected):
    assert match(pattern, path) is expected, (pattern, path)


def test_select_includes_top_level_files():
    paths = ["setup.py", "src/main.py", "src/pkg/test_util.py", "src/pkg/util.py", "docs/x.md"]
    assert select(["**/*.py", "!**/test_*.py"], paths) == ["setup.py", "src/main.py", "src/pkg/util.py"]
