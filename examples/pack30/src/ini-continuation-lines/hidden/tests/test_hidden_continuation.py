import pytest

from cfgini import IniError, parse


def test_indented_lines_continue_the_value():
    text = (
        "[mail]\nrecipients = ops@example.org\n    dev@example.org\n"
        "\tqa@example.org\nsubject = alert\n"
    )
    assert parse(text)["mail"] == {
        "recipients": "ops@example.org\ndev@example.org\nqa@example.org",
        "subject": "alert",
    }


def test_empty_first_value_and_equals_signs():
    text = "[job]\nenv =\n  PATH=/usr/bin\n  LANG=C.UTF-8\nname = nightly\n"
    assert parse(text)["job"] == {"env": "PATH=/usr/bin\nLANG=C.UTF-8", "name": "nightly"}


def test_blank_line_ends_the_value():
    with pytest.raises(IniError) as info:
        parse("[a]\nx = 1\n  2\n\n  3\n")
    assert info.value.line == 5


def test_comment_line_ends_the_value():
    with pytest.raises(IniError) as info:
        parse("[a]\nx = 1\n  2\n# comment\n  3\n")
    assert info.value.line == 5


def test_continuation_without_key_is_an_error():
    with pytest.raises(IniError) as info:
        parse("[a]\n  orphan\n")
    assert info.value.line == 2


def test_indented_comment_is_skipped():
    assert parse("[a]\nx = 1\n  ; note\ny = 2\n") == {"a": {"x": "1", "y": "2"}}


def test_default_section_and_case_rules_unchanged():
    text = "Name = svc\n  worker\n[Paths]\nRoot = /srv\n"
    assert parse(text) == {"DEFAULT": {"name": "svc\nworker"}, "paths": {"root": "/srv"}}
