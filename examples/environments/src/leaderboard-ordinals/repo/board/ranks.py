"""Rank labels of a leaderboard: "1st ada", "2nd bob", ..."""

import inflection


def rank_labels(players: list[str]) -> list[str]:
    """One label per player, in the order given: the first is ranked 1st."""
    return [f"{inflection.ordinalize(rank)} {name}" for rank, name in enumerate(players)]
