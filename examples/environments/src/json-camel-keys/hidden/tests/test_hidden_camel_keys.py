from api.serialize import to_json_keys


def test_flat_keys_are_lower_camel_case() -> None:
    assert to_json_keys({"user_id": 7, "name": "Ada"}) == {"userId": 7, "name": "Ada"}


def test_nested_records() -> None:
    record = {"home_address": {"zip_code": "1011", "street_name": "Dam"}}
    assert to_json_keys(record) == {"homeAddress": {"zipCode": "1011", "streetName": "Dam"}}


def test_records_in_lists_and_plain_values() -> None:
    record = {"line_items": [{"unit_price": 3}, "gift_card"], "tags": ["on_sale"]}
    assert to_json_keys(record) == {
        "lineItems": [{"unitPrice": 3}, "gift_card"],
        "tags": ["on_sale"],
    }
