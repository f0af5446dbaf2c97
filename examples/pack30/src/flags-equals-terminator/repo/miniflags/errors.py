"""Errors raised for a bad command line."""


class FlagError(ValueError):
    """The command line breaks one of the rules in docs/conventions.md."""
