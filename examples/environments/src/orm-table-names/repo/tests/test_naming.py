from orm.naming import column_name, table_name


def test_single_word_models() -> None:
    assert table_name("Person") == "people"
    assert table_name("Category") == "categories"


def test_column_names() -> None:
    assert column_name("createdAt") == "created_at"
