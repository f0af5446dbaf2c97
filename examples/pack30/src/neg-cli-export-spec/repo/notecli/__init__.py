"""notecli: a small note-taking command line."""

__version__ = "0.3.0"
