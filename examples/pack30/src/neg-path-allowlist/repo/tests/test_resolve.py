from pathlib import Path

import pytest

from safeserve import NotAllowed, resolve


def test_resolve():
    assert resolve("/srv/www", "/docs/./index.html") == Path("/srv/www/docs/index.html")
    assert resolve("/srv/www", "/") == Path("/srv/www")


def test_escape_refused():
    with pytest.raises(NotAllowed):
        resolve("/srv/www", "/../etc/passwd")
