import pytest

from orm.naming import table_name


@pytest.mark.parametrize(
    ("model", "table"),
    [
        ("Person", "people"),
        ("OrderItem", "order_items"),
        ("HTTPRequest", "http_requests"),
        ("ProductCategory", "product_categories"),
    ],
)
def test_table_names(model: str, table: str) -> None:
    assert table_name(model) == table
