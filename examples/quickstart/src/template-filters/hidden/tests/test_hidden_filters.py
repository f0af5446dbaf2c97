import types

import pytest

from minitpl import Template, TemplateError, render


def test_builtin_case_filters():
    assert render("{{ name|upper }}", name="Ada") == "ADA"
    assert render("{{ name|lower }}", name="ADA") == "ada"
    assert render("{{ name|title }}", name="ada lovelace") == "Ada Lovelace"


def test_strip_and_escape():
    assert render("[{{ s|strip }}]", s="  padded \n") == "[padded]"
    assert render("{{ s|escape }}", s='<a href="x">&</a>') == "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"


def test_filters_chain_left_to_right():
    assert render("{{ name|strip|title }}", name="  ada lovelace ") == "Ada Lovelace"
    assert render("{{ name|upper|lower }}", name="MiXeD") == "mixed"


def test_whitespace_around_pipes():
    assert render("{{ name | upper }}", name="ada") == "ADA"
    assert render("{{name|  strip |upper}}", name=" ada ") == "ADA"


def test_filters_apply_to_dotted_lookups_and_non_strings():
    user = types.SimpleNamespace(name="ada")
    assert render("{{ user.name|upper }}", user=user) == "ADA"
    assert render("{{ n|upper }}", n=42) == "42"


def test_custom_filters():
    tpl = Template("Total: {{ amount|money }}", filters={"money": lambda v: f"${v:,.2f}"})
    assert tpl.render(amount=1234.5) == "Total: $1,234.50"


def test_custom_filters_can_override_builtins():
    tpl = Template("{{ x|upper }}", filters={"upper": lambda v: "custom"})
    assert tpl.render(x="a") == "custom"


def test_custom_filters_do_not_leak_between_templates():
    Template("{{ x|shout }}", filters={"shout": lambda v: str(v) + "!"}).render(x="a")
    with pytest.raises(TemplateError):
        render("{{ x|shout }}", x="a")


def test_unknown_filter_names_the_filter():
    with pytest.raises(TemplateError, match="nosuchfilter"):
        render("{{ x|nosuchfilter }}", x="a")


def test_plain_tags_still_work():
    assert render("Hi {{ user.name }}", {"user": {"name": "Ada"}}) == "Hi Ada"
    with pytest.raises(TemplateError):
        render("{{ missing|upper }}")
