from datetime import datetime, timezone

import pytest

from sitetime import local_time


def test_known_sites():
    noon = datetime(2024, 1, 10, 12, 0, tzinfo=timezone.utc)
    assert local_time("MUC", noon).hour == 13
    assert local_time("NYC", noon).hour == 7
    assert local_time("SIN", noon).hour == 20


def test_unknown_site():
    with pytest.raises(ValueError):
        local_time("XXX", datetime(2024, 1, 1, tzinfo=timezone.utc))
