import json

import pytest

from layerconf import load_layers, merge, merge_all


def test_top_level_override():
    assert merge({"debug": False, "port": 80}, {"port": 8080}) == {"debug": False, "port": 8080}


def test_merge_all_order():
    assert merge_all({"a": 1}, {"a": 2}, {"a": 3, "b": 4}) == {"a": 3, "b": 4}
    assert merge_all() == {}


def test_load_layers(tmp_path):
    (tmp_path / "base.json").write_text(json.dumps({"a": 1, "b": 2}))
    (tmp_path / "prod.json").write_text(json.dumps({"b": 3}))
    assert load_layers([tmp_path / "base.json", tmp_path / "missing.json", tmp_path / "prod.json"]) == {"a": 1, "b": 3}


def test_layer_must_be_an_object(tmp_path):
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError):
        load_layers([tmp_path / "bad.json"])
