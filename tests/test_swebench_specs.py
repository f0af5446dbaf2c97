"""Per-repository specs for ``deltarun import swebench --specs``: SWE-bench's shape read,
each key's meaning, and bad input as one line naming the file, the repo, the version and
the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import UsageError
from runner.swebench.specs import dockerfile, parse_specs

SPECS = """
acme/cov:
  "1.0":
    python: "3.11"
    pip_packages: ["pytest-cov==5.0.0", "coverage==7.6.1"]
    pre_install: ["sed -i 's/a/b/' setup.cfg"]
    install: python -m pip install -e . --no-deps --no-build-isolation
    test_cmd: pytest --no-header -rA --tb=no -p no:cacheprovider
    env_vars: {TZ: UTC, LEVEL: 3}
    eval_commands: ["export LANG=C"]
acme/plain:
  "0.1": {}
"""


def test_each_key_means_what_the_table_says() -> None:
    specs = parse_specs(SPECS, "specs.yaml")
    spec = specs.of("acme/cov", "1.0")
    assert spec is not None
    assert spec.install == (
        "sed -i 's/a/b/' setup.cfg",
        "python -m pip install -e . --no-deps --no-build-isolation",
    )
    assert spec.pytest_args == ("--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider")
    assert dict(spec.env_vars) == {"LEVEL": "3", "TZ": "UTC"}
    assert spec.needs_environment
    assert specs.warnings == (
        "specs.yaml: eval_commands is a SWE-bench key deltarun does not use; ignored",
    )
    plain = specs.of("acme/plain", "0.1")
    assert plain is not None and not plain.needs_environment and plain.install == ()
    assert specs.of("acme/plain", "9") is None


def test_the_environment_installs_the_pins_offline_and_checks_python() -> None:
    spec = parse_specs(SPECS, "specs.yaml").of("acme/cov", "1.0")
    assert spec is not None
    text = dockerfile(spec, "deltarun/sandbox-python:bookworm", wheels=True)
    assert text.startswith("FROM deltarun/sandbox-python:bookworm\nUSER root\n")
    assert "--no-index --find-links /tmp/deltarun-wheels" in text
    assert "pytest-cov==5.0.0 coverage==7.6.1" in text
    assert "assert v == (3, 11)" in text
    assert 'ENV TZ="UTC"' in text and text.endswith("USER agent\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("acme/x:\n  '1': {instal: x}\n", "specs.yaml: acme/x 1: unknown key 'instal'"),
        ("acme/x:\n  '1': {pip_packages: ['-e .']}\n", "pip_packages: '-e .' is not a requirement"),
        ("acme/x:\n  '1': {test_cmd: tox -e py}\n", "names no test runner deltarun knows"),
        ("acme/x:\n  '1': {python: '3'}\n", "python must be a version like 3.11"),
        ("acme/x:\n  '1': {env_vars: {'1X': a}}\n", "env_vars must map NAME"),
        ("acme:\n  '1': {}\n", "a repo is written owner/name"),
        ("[1, 2]\n", "must map each repo"),
    ],
)
def test_bad_specs_are_one_line_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_specs(text, "specs.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_spec_no_instance_uses_and_an_ignored_key_are_warnings(tmp_path: Path) -> None:
    from runner.swebench.import_envs import read_specs
    from runner.swebench.instances import Instance

    path = tmp_path / "specs.yaml"
    path.write_text(SPECS)
    used = Instance("acme__cov-1", "acme/cov", "a" * 40, "", "", "p", "", "1.0", (), ())
    said: list[str] = []
    specs = read_specs(path, [used], said.append)
    assert specs.of("acme/cov", "1.0") is not None
    assert said == [
        f"warning: {path}: eval_commands is a SWE-bench key deltarun does not use; ignored",
        f"warning: {path}: acme/plain 0.1: no instance uses this spec",
    ]
    with pytest.raises(UsageError, match="specs file not found"):
        read_specs(tmp_path / "missing.yaml", [used], said.append)
