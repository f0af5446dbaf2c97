import pytest

from csvlite import CsvError, read_dicts, read_records, split_fields


def test_plain_records():
    assert read_records("a,b\n1,2\n") == [["a", "b"], ["1", "2"]]


def test_quotes_protect_delimiters_and_escape_quotes():
    assert split_fields('1,"a, b","say ""hi"""') == ["1", "a, b", 'say "hi"']


def test_blank_lines_skipped_and_other_delimiter():
    assert read_records("a;b\n\n1;2\n", delimiter=";") == [["a", "b"], ["1", "2"]]


def test_read_dicts():
    assert read_dicts("id,name\n1,Ada\n2,Alan\n") == [
        {"id": "1", "name": "Ada"},
        {"id": "2", "name": "Alan"},
    ]


def test_unterminated_quote():
    with pytest.raises(CsvError) as info:
        read_records('a,b\n1,"open\n')
    assert info.value.line == 2
