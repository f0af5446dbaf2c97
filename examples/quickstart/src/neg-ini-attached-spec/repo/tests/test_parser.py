import pytest

from iniread import IniError, parse

SAMPLE = """
; global settings
[server]
Host = 0.0.0.0
port = 8080

[paths]
data = /var/lib/app   # trailing comment
url = http://example.org/?a=b#frag
"""


def test_sections_and_keys():
    config = parse(SAMPLE)
    assert config["server"] == {"host": "0.0.0.0", "port": "8080"}


def test_inline_comments_and_equals_in_values():
    paths = parse(SAMPLE)["paths"]
    assert paths["data"] == "/var/lib/app"
    assert paths["url"] == "http://example.org/?a=b#frag"


@pytest.mark.parametrize(
    "text,line",
    [("[a]\n[a]\n", 2), ("[a]\nx = 1\nx = 2\n", 3), ("x = 1\n", 1), ("[a]\nnovalue\n", 2), ("[ ]\n", 1)],
)
def test_errors_report_line(text, line):
    with pytest.raises(IniError) as info:
        parse(text)
    assert info.value.line == line
