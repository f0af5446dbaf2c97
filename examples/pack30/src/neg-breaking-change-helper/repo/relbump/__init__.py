"""relbump: suggest the next semantic version."""

from relbump.bump import next_version, suggest_bump
from relbump.commits import Commit, parse_commit

__all__ = ["Commit", "next_version", "parse_commit", "suggest_bump"]
