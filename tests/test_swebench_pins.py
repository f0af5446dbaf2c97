"""Unpinned ``pip_packages`` in a SWE-bench specs file (issue 38, item 4): pinned once at
import, on this machine, to the version pip fetches for the environment's Python, with one
warning per package; the pinned spec is what the suite holds. pip reads a local folder of
wheels here (``PIP_FIND_LINKS``, no index), as a user's pip would read a proxy or a cache."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from runner.errors import UsageError, UserError
from runner.swebench.pins import pin_specs
from runner.swebench.specs import parse_specs
from tests.conftest import run_cli
from tests.test_swebench import dataset, import_args

__all__ = ["dataset"]  # the module-scoped fixture, shared with test_swebench


def make_wheel(folder: Path, name: str, version: str, requires_python: str = "") -> Path:
    """A pure-Python wheel pip accepts: metadata, WHEEL, RECORD and one module."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        metadata += f"Requires-Python: {requires_python}\n"
    files = {
        f"{dist}.py": "VALUE = 1\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A local index of wheels, and pip's environment to use it alone."""
    folder = tmp_path / "wheelhouse"
    make_wheel(folder, "flake8-comprehensions", "3.14.0")
    make_wheel(folder, "flake8-comprehensions", "3.15.0")
    make_wheel(folder, "flake8-comprehensions", "3.16.0", requires_python=">=3.12")
    make_wheel(folder, "ranged", "1.5")
    make_wheel(folder, "ranged", "2.1")
    make_wheel(folder, "exact", "1.0")
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), "PIP_CONFIG_FILE": "/dev/null"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


SPECS = """
acme/textkit:
  "1.0":
    python: "3.11"
    pip_packages: [flake8-comprehensions, "ranged>=1,<2", exact==1.0]
acme/other:
  "2.0":
    pip_packages: [flake8-comprehensions]
"""


def test_unpinned_requirements_are_pinned_once_with_a_warning_each(wheels: dict[str, str]) -> None:
    specs = parse_specs(SPECS, "s.yaml")
    said: list[str] = []
    pinned = pin_specs(specs, [("acme/textkit", "1.0"), ("acme/other", "2.0")], said.append)
    spec = pinned.of("acme/textkit", "1.0")
    assert spec is not None
    # 3.16.0 needs Python 3.12: the newest for the environment's 3.11 is 3.15.0.
    assert spec.pip_packages == ("flake8-comprehensions==3.15.0", "ranged==1.5", "exact==1.0")
    assert spec.unpinned == ()
    other = pinned.of("acme/other", "2.0")
    assert other is not None and other.pip_packages == ("flake8-comprehensions==3.15.0",)
    assert said == [
        "warning: s.yaml: acme/other 2.0: pip_packages 'flake8-comprehensions' is not an exact "
        "pin; pinned flake8-comprehensions==3.15.0 (what pip fetches for Python 3.11 now); "
        "write the pin into the specs file to keep it",
        "warning: s.yaml: acme/textkit 1.0: pip_packages 'flake8-comprehensions' is not an "
        "exact pin; pinned flake8-comprehensions==3.15.0 (what pip fetches for Python 3.11 "
        "now); write the pin into the specs file to keep it",
        "warning: s.yaml: acme/textkit 1.0: pip_packages 'ranged>=1,<2' is not an exact pin; "
        "pinned ranged==1.5 (what pip fetches for Python 3.11 now); write the pin into the "
        "specs file to keep it",
    ]
    # A spec no instance uses is not resolved.
    assert pin_specs(specs, [], said.append).of("acme/other", "2.0") == specs.of(
        "acme/other", "2.0"
    )


def test_a_requirement_pip_cannot_meet_is_one_line_with_the_fix(wheels: dict[str, str]) -> None:
    specs = parse_specs("acme/x:\n  '1': {pip_packages: ['ranged>=3']}\n", "specs.yaml")
    with pytest.raises(UserError) as info:
        pin_specs(specs, [("acme/x", "1")], lambda _line: None)
    message = str(info.value)
    assert message.startswith("specs.yaml: acme/x 1: pip_packages 'ranged>=3': pip found no ")
    assert message.endswith(
        "pin it (name==version) in the specs file, or make a wheel for "
        "Python 3.11 reachable to this machine's pip"
    )
    assert "\n" not in message


@pytest.mark.parametrize(
    "requirement",
    [
        "-e .", "--index-url=http://x", "pkg @ https://x/p.whl", "../pkg", "/tmp/p.whl",
        "git+https://x/p", "pkg\n", "pkg ; python_version<'3'", "a b", "pkg[x]>=1 ,<2", "",
        "pkg>=", "pkg\x00",
    ],
)  # fmt: skip
def test_requirements_are_matched_whole(requirement: str) -> None:
    text = json.dumps({"acme/x": {"1": {"pip_packages": [requirement]}}})
    with pytest.raises(UsageError) as info:
        parse_specs(text, "specs.json")
    assert "pip_packages:" in str(info.value) and "is not a requirement" in str(info.value)


def test_import_writes_the_pins_into_the_suite(
    dataset: dict[str, Path], tmp_path: Path, wheels: dict[str, str]
) -> None:
    """`deltarun import swebench --specs` with unpinned packages: the warnings on stderr,
    the environment's Dockerfile installs the exact pins, its context holds their wheels;
    a package pip cannot find stops the import with one line and writes nothing."""
    specs = tmp_path / "specs.yaml"
    specs.write_text(SPECS.split("acme/other")[0])
    made = run_cli(*import_args(dataset, tmp_path / "s", "--specs", str(specs)), env=wheels)
    assert made.returncode == 0, made.stderr
    warnings = [line for line in made.stderr.splitlines() if "is not an exact pin" in line]
    assert len(warnings) == 2, made.stderr
    assert f"warning: {specs}: acme/textkit 1.0: pip_packages 'ranged>=1,<2'" in warnings[1]
    (context,) = (tmp_path / "s" / "suite" / "environments").iterdir()
    dockerfile = (context / "Dockerfile").read_text()
    assert "flake8-comprehensions==3.15.0 ranged==1.5 exact==1.0" in dockerfile
    assert sorted(p.name for p in (context / "wheels").iterdir()) == [
        "exact-1.0-py3-none-any.whl",
        "flake8_comprehensions-3.15.0-py3-none-any.whl",
        "ranged-1.5-py3-none-any.whl",
    ]
    # A Dockerfile template makes the environment: the specs' packages are not used, so
    # not resolved (a missing one stops nothing).
    specs.write_text("acme/textkit:\n  '1.0': {pip_packages: [missing-package]}\n")
    template = tmp_path / "template" / "Dockerfile"
    template.parent.mkdir()
    template.write_text("ARG BASE\nFROM ${BASE}\n")
    args = import_args(dataset, tmp_path / "u", "--specs", str(specs))
    templated = run_cli(*args, "--dockerfile-template", str(template), env=wheels)
    assert templated.returncode == 0, templated.stderr
    assert "missing-package" not in templated.stderr
    failed = run_cli(*import_args(dataset, tmp_path / "t", "--specs", str(specs)), env=wheels)
    assert failed.returncode == 1
    lines = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert lines[0].startswith(f"deltarun: error: {specs}: acme/textkit 1.0: pip_packages ")
    assert "pin it (name==version) in the specs file" in lines[0]
    assert not (tmp_path / "t").exists()


def test_an_exact_pin_without_a_wheel_is_one_line_naming_the_spec_and_the_fix(
    dataset: dict[str, Path], tmp_path: Path, wheels: dict[str, str]
) -> None:
    """SWE-bench's own specs pin versions older than the environment's Python has wheels
    for (Flask 2.3's MarkupSafe==2.1.1 on 3.11): the import says which, where and what to
    do, in one line, and writes nothing."""
    specs = tmp_path / "specs.yaml"
    specs.write_text("acme/textkit:\n  '1.0': {python: '3.11', pip_packages: [exact==9.9]}\n")
    failed = run_cli(*import_args(dataset, tmp_path / "t", "--specs", str(specs)), env=wheels)
    assert failed.returncode == 1, failed.stderr
    lines = [line for line in failed.stderr.splitlines() if line.strip()]
    error = [line for line in lines if line.startswith("deltarun: ")]
    assert len(error) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert error[0].startswith(
        f"deltarun: error: {specs}: acme/textkit 1.0: pip_packages: no wheel of exact==9.9 "
        "for Python 3.11 ("
    ), error[0]
    assert "pin a version that has a wheel for Python 3.11" in error[0]
    assert not (tmp_path / "t").exists()
