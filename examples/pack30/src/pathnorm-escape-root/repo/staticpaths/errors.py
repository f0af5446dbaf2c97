"""Errors."""


class UnsafePath(ValueError):
    """The request path would leave the files root or is otherwise not servable."""
