"""mirrortool: mirror a directory to a remote host."""

__version__ = "1.5.2"
