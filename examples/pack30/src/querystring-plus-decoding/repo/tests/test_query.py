from qsparse import build_query, get_first, parse_query


def test_simple_and_repeated():
    assert parse_query("?tag=a&tag=b&page=2") == {"tag": ["a", "b"], "page": ["2"]}


def test_blank_values():
    assert parse_query("a=&b&c=1") == {"c": ["1"]}
    assert parse_query("a=&b&c=1", keep_blank=True) == {"a": [""], "b": [""], "c": ["1"]}


def test_percent_encoded_text():
    assert parse_query("city=M%C3%BCnchen") == {"city": ["München"]}


def test_get_first():
    query = parse_query("x=1&x=2")
    assert get_first(query, "x") == "1"
    assert get_first(query, "y", "none") == "none"


def test_build_query():
    assert build_query({"tag": ["a", "b"], "page": "2"}) == "tag=a&tag=b&page=2"
    assert parse_query(build_query({"id": "42"})) == {"id": ["42"]}
