import pytest

from serveit import load_settings


def test_flag_beats_environment():
    settings = load_settings(["--port", "8080", "--host", "localhost"], {"SERVEIT_PORT": "9000", "SERVEIT_HOST": "0.0.0.0"})
    assert (settings.host, settings.port) == ("localhost", 8080)


def test_environment_beats_default_and_is_converted():
    settings = load_settings([], {"SERVEIT_PORT": "9000", "SERVEIT_WORKERS": "8", "SERVEIT_HOST": "0.0.0.0"})
    assert (settings.host, settings.port, settings.workers) == ("0.0.0.0", 9000, 8)


@pytest.mark.parametrize(
    "value,expected",
    [("1", True), ("TRUE", True), ("yes", True), ("On", True), ("0", False), ("false", False), ("NO", False), ("off", False)],
)
def test_debug_from_environment(value, expected):
    assert load_settings([], {"SERVEIT_DEBUG": value}).debug is expected


def test_debug_flag_beats_environment():
    assert load_settings(["--debug"], {"SERVEIT_DEBUG": "0"}).debug is True


@pytest.mark.parametrize(
    "name,value",
    [("SERVEIT_PORT", "abc"), ("SERVEIT_WORKERS", "2.5"), ("SERVEIT_DEBUG", "maybe")],
)
def test_invalid_environment_value_is_a_usage_error(name, value, capsys):
    with pytest.raises(SystemExit) as info:
        load_settings([], {name: value})
    assert info.value.code == 2
    assert name in capsys.readouterr().err
