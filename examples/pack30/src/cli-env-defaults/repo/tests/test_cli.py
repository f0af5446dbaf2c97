import pytest

from serveit import Settings, load_settings


def test_defaults():
    assert load_settings([], {}) == Settings()


def test_flags():
    settings = load_settings(["--port", "8080", "--workers", "4", "--debug", "site"], {})
    assert settings == Settings(port=8080, workers=4, debug=True, root="site")


def test_host_from_environment():
    assert load_settings([], {"SERVEIT_HOST": "0.0.0.0"}).host == "0.0.0.0"


def test_bad_flag_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        load_settings(["--port", "abc"], {})
    assert info.value.code == 2
