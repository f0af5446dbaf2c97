from board.ranks import rank_labels


def test_no_players() -> None:
    assert rank_labels([]) == []
