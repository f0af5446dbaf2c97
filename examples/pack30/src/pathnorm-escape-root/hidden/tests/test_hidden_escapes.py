import pytest

from staticpaths import UnsafePath, normalize, to_filesystem


@pytest.mark.parametrize(
    "path",
    [
        "/../secrets.txt",
        "..",
        "/a/../../b",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/%2E%2E%2Fconfig.py",
        "/..\\..\\config.py",
        "docs\\..\\..\\x",
        "/file%00.txt",
        "/file\x00.txt",
    ],
)
def test_unsafe_paths_are_refused(path):
    with pytest.raises(UnsafePath):
        normalize(path)


@pytest.mark.parametrize(
    "path,expected",
    [
        ("/docs%2Fguide/intro.html", "docs/guide/intro.html"),
        ("/img\\logo.png", "img/logo.png"),
        ("/a/b/..", "a"),
        ("/a/..", ""),
        ("/a/b/%2e%2e/c/", "a/c/"),
        ("/./docs/.", "docs"),
        ("/caf%C3%A9.html", "café.html"),
        ("/a/..b/c", "a/..b/c"),
    ],
)
def test_safe_paths(path, expected):
    assert normalize(path) == expected


def test_to_filesystem_refuses_escapes(tmp_path):
    with pytest.raises(UnsafePath):
        to_filesystem(tmp_path, "/../outside")
