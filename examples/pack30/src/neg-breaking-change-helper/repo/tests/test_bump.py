from relbump import next_version, suggest_bump


def test_suggest():
    assert suggest_bump(["fix: typo"]) == "patch"
    assert suggest_bump(["fix: typo", "feat: export"]) == "minor"
    assert suggest_bump(["feat!: drop Python 3.8"]) == "major"
    assert suggest_bump(["chore: deps"]) == "none"
    assert suggest_bump(["refactor: x\n\nBREAKING CHANGE: config renamed"]) == "major"


def test_next_version():
    assert next_version("1.4.2", "minor") == "1.5.0"
    assert next_version("1.4.2", "none") == "1.4.2"
