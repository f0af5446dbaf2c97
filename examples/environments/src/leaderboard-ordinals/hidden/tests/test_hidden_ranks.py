from board.ranks import rank_labels


def test_podium() -> None:
    assert rank_labels(["ada", "bob", "cy"]) == ["1st ada", "2nd bob", "3rd cy"]


def test_teens_and_twenties() -> None:
    labels = rank_labels([f"p{n}" for n in range(1, 23)])
    assert labels[10:13] == ["11th p11", "12th p12", "13th p13"]
    assert labels[20:] == ["21st p21", "22nd p22"]
