from api.serialize import to_json_keys


def test_empty_record() -> None:
    assert to_json_keys({}) == {}
