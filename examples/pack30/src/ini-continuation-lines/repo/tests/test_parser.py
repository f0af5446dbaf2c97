import pytest

from cfgini import IniError, parse, parse_file


def test_sections_and_keys():
    text = "[Server]\nHost = example.org\nport=8080\n"
    assert parse(text) == {"server": {"host": "example.org", "port": "8080"}}


def test_comments_and_blank_lines():
    text = "; top comment\n\n[a]\n# note\nx = 1\n"
    assert parse(text) == {"a": {"x": "1"}}


def test_default_section():
    assert parse("debug = yes\n[a]\nx = 1\n") == {"DEFAULT": {"debug": "yes"}, "a": {"x": "1"}}


def test_malformed_line_reports_its_number():
    with pytest.raises(IniError) as info:
        parse("[a]\nx = 1\nnot a pair\n")
    assert info.value.line == 3


def test_parse_file(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[db]\nurl = sqlite:///app.db\n", encoding="utf-8")
    assert parse_file(path) == {"db": {"url": "sqlite:///app.db"}}
