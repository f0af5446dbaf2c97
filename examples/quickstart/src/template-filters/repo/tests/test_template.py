import types

import pytest

from minitpl import Template, TemplateError, render


def test_simple_substitution():
    assert render("Hello {{ name }}!", {"name": "Ada"}) == "Hello Ada!"


def test_whitespace_inside_tags_is_optional():
    assert render("{{name}}/{{  name  }}", name="x") == "x/x"


def test_dotted_lookup_on_mappings_and_objects():
    user = types.SimpleNamespace(email="ada@example.org")
    assert render("{{ a.b }} {{ u.email }}", {"a": {"b": 1}, "u": user}) == "1 ada@example.org"


def test_kwargs_override_context():
    assert Template("{{ x }}").render({"x": 1}, x=2) == "2"


def test_undefined_name():
    with pytest.raises(TemplateError):
        render("{{ missing }}")
    with pytest.raises(TemplateError):
        render("{{ a.nope }}", a={})
