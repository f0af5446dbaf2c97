import copy
import json

from layerconf import load_layers, merge, merge_all

DEFAULTS = {"db": {"host": "localhost", "port": 5432, "pool": {"min": 1, "max": 10}}, "debug": False, "tags": ["a"]}
PRODUCTION = {"db": {"host": "db.internal", "pool": {"max": 50}}}


def test_nested_dicts_merge_key_by_key():
    assert merge_all(DEFAULTS, PRODUCTION) == {
        "db": {"host": "db.internal", "port": 5432, "pool": {"min": 1, "max": 50}},
        "debug": False,
        "tags": ["a"],
    }


def test_non_dict_values_replace():
    assert merge({"tags": ["a", "b"], "db": {"x": 1}}, {"tags": ["c"], "db": "sqlite://"}) == {
        "tags": ["c"],
        "db": "sqlite://",
    }
    assert merge({"db": "sqlite://"}, {"db": {"x": 1}}) == {"db": {"x": 1}}


def test_none_removes_a_key():
    assert merge(DEFAULTS, {"debug": None, "db": {"pool": None}}) == {
        "db": {"host": "localhost", "port": 5432},
        "tags": ["a"],
    }
    assert merge({"a": 1}, {"missing": None}) == {"a": 1}


def test_inputs_untouched_and_not_shared():
    base, override = copy.deepcopy(DEFAULTS), copy.deepcopy(PRODUCTION)
    result = merge_all(base, override)
    assert base == DEFAULTS and override == PRODUCTION
    result["db"]["pool"]["min"] = 99
    result["tags"].append("z")
    assert base == DEFAULTS and override == PRODUCTION
    result2 = merge({"only": {"x": [1]}}, {})
    result2["only"]["x"].append(2)
    assert result2 != {"only": {"x": [1]}}


def test_load_layers_deep(tmp_path):
    (tmp_path / "defaults.json").write_text(json.dumps(DEFAULTS))
    (tmp_path / "production.json").write_text(json.dumps(PRODUCTION))
    merged = load_layers([tmp_path / "defaults.json", tmp_path / "production.json"])
    assert merged["db"] == {"host": "db.internal", "port": 5432, "pool": {"min": 1, "max": 50}}
