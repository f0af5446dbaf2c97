"""A tiny object-relational mapper."""

from orm.naming import column_name, table_name

__all__ = ["column_name", "table_name"]
