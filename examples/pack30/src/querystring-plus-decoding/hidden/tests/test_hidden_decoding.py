from qsparse import build_query, parse_query


def test_plus_is_a_space():
    assert parse_query("q=new+york&page=2") == {"q": ["new york"], "page": ["2"]}


def test_encoded_delimiters_stay_in_values():
    assert parse_query("q=fish%20%26%20chips&sort=price%3Dasc") == {
        "q": ["fish & chips"],
        "sort": ["price=asc"],
    }


def test_encoded_plus_is_a_plus():
    assert parse_query("lang=c%2B%2B&expr=1%2B1+%3D+2") == {"lang": ["c++"], "expr": ["1+1 = 2"]}


def test_names_are_decoded():
    assert parse_query("first+name=Ada&tag%5B%5D=x") == {"first name": ["Ada"], "tag[]": ["x"]}


def test_round_trip_with_build_query():
    params = {"q": ["a b", "c&d", "e=f", "1+1", "ünï"], "x y": ["z"]}
    assert parse_query(build_query(params)) == params
