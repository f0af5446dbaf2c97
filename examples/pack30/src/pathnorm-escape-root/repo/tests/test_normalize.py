from pathlib import Path

import pytest

from staticpaths import normalize, to_filesystem


@pytest.mark.parametrize(
    "path,expected",
    [
        ("/docs//guide/./intro.html", "docs/guide/intro.html"),
        ("/docs/", "docs/"),
        ("/a/b/../c", "a/c"),
        ("", ""),
        ("/", ""),
        ("img/logo.png", "img/logo.png"),
    ],
)
def test_normalize(path, expected):
    assert normalize(path) == expected


def test_to_filesystem(tmp_path):
    assert to_filesystem(tmp_path, "/css/site.css") == Path(tmp_path) / "css" / "site.css"
