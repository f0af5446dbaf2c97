from notecli.cli import main


def test_add_and_list(tmp_path):
    store = str(tmp_path / "notes.json")
    assert main(["--store", store, "add", "Buy milk", "--tag", "home"]) == 0
    assert main(["--store", store, "add", "Ship release"]) == 0
    out = []
    main(["--store", store, "list"], out)
    assert out == ["Ship release", "Buy milk"]
    out = []
    main(["--store", store, "list", "--tag", "home"], out)
    assert out == ["Buy milk"]
