"""Table and column names for model classes, the Rails way."""

import inflection


def table_name(class_name: str) -> str:
    """The table of a model class: snake_case and plural (``OrderItem`` -> ``order_items``)."""
    return inflection.pluralize(class_name.lower())


def column_name(attribute: str) -> str:
    """The column of an attribute: snake_case (``createdAt`` -> ``created_at``)."""
    return inflection.underscore(attribute)
