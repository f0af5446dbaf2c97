"""What may be served."""


class NotAllowed(PermissionError):
    """The request path may not be served."""
