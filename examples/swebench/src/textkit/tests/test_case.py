from textkit.case import camel_to_snake, snake_to_camel


class TestCamel:
    def test_simple(self):
        assert camel_to_snake("orderItem") == "order_item"

    def test_acronym(self):
        assert camel_to_snake("HTTPRequest") == "http_request"


def test_snake_to_camel():
    assert snake_to_camel("order_item") == "orderItem"
