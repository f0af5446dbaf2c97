import pytest

from csvlite import CsvError, read_dicts, read_records

EXPORT = (
    'id,title,body\n'
    '17,"Login fails","Steps:\n1. open the app\n2. log in"\n'
    '18,Typo,"Fix ""Recieve"""\n'
)


def test_line_breaks_inside_quotes_stay_in_the_field():
    assert read_records(EXPORT) == [
        ["id", "title", "body"],
        ["17", "Login fails", "Steps:\n1. open the app\n2. log in"],
        ["18", "Typo", 'Fix "Recieve"'],
    ]


def test_crlf_input():
    assert read_records(EXPORT.replace("\n", "\r\n")) == read_records(EXPORT)


def test_blank_line_inside_quotes_is_kept():
    assert read_records('a,"one\n\ntwo",b\nc,d,e\n') == [["a", "one\n\ntwo", "b"], ["c", "d", "e"]]


def test_read_dicts_with_multiline_field():
    rows = read_dicts(EXPORT)
    assert rows[0]["body"].splitlines() == ["Steps:", "1. open the app", "2. log in"]
    assert rows[1]["title"] == "Typo"


def test_unterminated_quote_reports_the_record_start():
    with pytest.raises(CsvError) as info:
        read_records('a,b\n1,"open\nstill open\n\n')
    assert info.value.line == 2
    assert "unterminated" in str(info.value)


def test_other_delimiters():
    assert read_records('x;"a;\nb"\n', delimiter=";") == [["x", "a;\nb"]]
