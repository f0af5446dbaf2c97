import io

import pytest

from csvimport import ImportRowError, read_contacts

EXPORT = (
    "Name,E-mail,Phone,Internal ID\n"
    "Ada Lovelace, ada@example.org ,+44 20 7946 0000,17\n"
    "Alan Turing,alan@example.org,,18\n"
)


def test_reads_and_renames_columns():
    rows = list(read_contacts(io.StringIO(EXPORT)))
    assert rows[0] == {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+44 20 7946 0000"}
    assert rows[1]["phone"] == ""


def test_custom_mapping():
    rows = list(read_contacts(io.StringIO(EXPORT), mapping={"Name": "name", "E-mail": "email"}))
    assert rows[1] == {"name": "Alan Turing", "email": "alan@example.org"}


def test_missing_required_field_reports_line():
    bad = "Name,E-mail\nAda,ada@example.org\nNo Mail,\n"
    with pytest.raises(ImportRowError) as info:
        list(read_contacts(io.StringIO(bad)))
    assert info.value.line == 3
