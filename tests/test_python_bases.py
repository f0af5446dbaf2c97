"""A spec's ``python`` picks the sandbox base of that Python (``runner.swebench.import_envs``:
Debian bullseye for 3.9, bookworm for 3.11, trixie for 3.13), and an environment built on
bullseye's Python 3.9 (pip 20.3, pytest 6.0) installs the project and grades it with the
harness's scripts, with the real engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import UserError
from runner.swebench.import_envs import PYTHON_BASES, SANDBOX_IMAGE, suite_image
from runner.swebench.instances import Instance
from runner.swebench.specs import Spec, Specs, dockerfile
from tests.conftest import IN_CI, path_lock, run_cli
from tests.test_instance_images import GOLD, TEST_PATCH

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "fixtures" / "instance_image" / "testbed"
BULLSEYE = PYTHON_BASES["3.9"]


def _instance(repo: str, version: str) -> Instance:
    return Instance(
        instance_id=f"{repo.replace('/', '__')}-{version}",
        repo=repo,
        base_commit="0" * 40,
        patch="",
        test_patch="",
        problem_statement="x",
        hints_text="",
        version=version,
        fail_to_pass=(),
        pass_to_pass=(),
    )


def test_the_specs_python_picks_the_base_and_one_suite_has_one() -> None:
    a, b = _instance("o/a", "1"), _instance("o/b", "1")
    specs = Specs({("o/a", "1"): Spec(python="3.9"), ("o/b", "1"): Spec(python="3.13")})
    assert suite_image([a], specs) == "deltarun/sandbox-python:bullseye"
    assert suite_image([b], specs) == "deltarun/sandbox-python:trixie"
    assert suite_image([a], specs, from_specs=False) == SANDBOX_IMAGE
    assert suite_image([a], Specs({("o/a", "1"): Spec(python="3.8")})) == SANDBOX_IMAGE
    with pytest.raises(UserError, match=r"the specs pin Python 3\.13 and 3\.9"):
        suite_image([a, b], specs)


def test_pins_install_with_any_pip() -> None:
    """bullseye's pip 20.3 has no --break-system-packages: given only to a pip that has it."""
    text = dockerfile(Spec(pip_packages=("six==1.16.0",), python="3.9"), BULLSEYE, True)
    assert text.startswith(f"FROM {BULLSEYE}\n")
    assert "grep -q -e --break-system-packages; then set -- --break-system-packages" in text
    assert '"$@" --no-compile' in text


@pytest.fixture(scope="module")
def bullseye(docker_api: Any) -> str:
    """deltarun/sandbox-python:bullseye (its debootstrap takes about 2 minutes the first
    time; the labels keep both images)."""
    with path_lock("bullseye-base"):
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build-python-base.sh"), "bullseye"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
    if done.returncode != 0:
        message = f"building {BULLSEYE} failed: {done.stderr[-2000:]}"
        if IN_CI or shutil.which("debootstrap"):
            pytest.fail(message)
        pytest.skip(message)
    return BULLSEYE


def _clone(at: Path) -> str:
    """A clone of the tiny project at one commit; its id."""
    shutil.copytree(PROJECT, at)
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    for argv in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "b"],
    ):
        subprocess.run(argv, cwd=at, env=env, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=at, capture_output=True, text=True)
    return head.stdout.strip()


@pytest.mark.docker
def test_a_spec_pinning_python_39_builds_on_bullseye_and_grades(
    bullseye: str, tmp_path: Path
) -> None:
    commit = _clone(tmp_path / "repos" / "tinycalc__tinycalc")
    row = {
        "instance_id": "tinycalc__tinycalc-1",
        "repo": "tinycalc/tinycalc",
        "base_commit": commit,
        "version": "0.1",
        "problem_statement": "clamp() does not hold a value above the high bound.",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_clamp_high"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_add"],
    }
    (tmp_path / "instances.jsonl").write_text(json.dumps(row) + "\n")
    specs = {
        "tinycalc/tinycalc": {
            "0.1": {
                "python": "3.9",
                "install": "python -m pip install -e . --no-deps --no-build-isolation",
                "env_vars": {"TINYCALC_MODE": "strict"},
                "test_cmd": "pytest -rA",
            }
        }
    }
    (tmp_path / "specs.yaml").write_text(yaml.safe_dump(specs))
    for name, patch in (("nothing", ""), ("gold", GOLD)):
        line = {"instance_id": row["instance_id"], "model_name_or_path": name, "model_patch": patch}
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(line) + "\n")
    out = tmp_path / "suite"
    imported = run_cli(
        "import", "swebench", str(tmp_path / "instances.jsonl"), "--repos", str(tmp_path / "repos"),
        "--specs", str(tmp_path / "specs.yaml"), "--out", str(out), "--timeout", "120",
        "--predictions", f"nothing={tmp_path / 'nothing.jsonl'}",
        "--predictions", f"gold={tmp_path / 'gold.jsonl'}",
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert f"environments are built on {bullseye}" in imported.stderr
    controls = out / "controls.yaml"
    assert yaml.safe_load(controls.read_text())["runtime"]["image"] == bullseye
    built = run_cli("build", str(controls), "--network", "none")
    assert built.returncode == 0, built.stdout + built.stderr
    valid = run_cli("validate", str(controls))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "valid" in valid.stdout
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    trials = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").open()]
    assert {t["arm"]: t["outcome"] for t in trials} == {"nothing": "miss", "gold": "success"}


def _wheel(into: Path) -> None:
    """A pure-Python wheel made here, with no network: tinyw 1.0."""
    import base64
    import hashlib
    import zipfile

    files = {
        "tinyw/__init__.py": b"X = 1\n",
        "tinyw-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinyw\nVersion: 1.0\n",
        "tinyw-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append("tinyw-1.0.dist-info/RECORD,,")
    into.mkdir(parents=True)
    with zipfile.ZipFile(into / "tinyw-1.0-py3-none-any.whl", "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tinyw-1.0.dist-info/RECORD", "\n".join(record) + "\n")


@pytest.mark.docker
@pytest.mark.parametrize("python", ["3.9", "3.11"])
def test_pinned_wheels_install_offline_with_each_bases_pip(
    docker_api: Any, bullseye: str, python: str, tmp_path: Path
) -> None:
    """bullseye's pip 20.3 (no --break-system-packages) and bookworm's 23 (which needs it)
    both install the fetched wheels with no network."""
    import io
    import tarfile

    base = PYTHON_BASES[python]
    _wheel(tmp_path / "wheels")
    (tmp_path / "Dockerfile").write_text(
        dockerfile(Spec(pip_packages=("tinyw==1.0",), python=python), base, True)
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        archive.add(tmp_path / "Dockerfile", arcname="Dockerfile")
        archive.add(tmp_path / "wheels", arcname="wheels")
    context.seek(0)
    image, log = "", []
    for event in docker_api.build(
        fileobj=context, custom_context=True, network_mode="none", rm=True, forcerm=True,
        decode=True, labels={"deltarun.test.python-bases": tmp_path.name},
    ):  # fmt: skip
        log.append(str(event.get("stream") or event.get("error") or ""))
        image = (event.get("aux") or {}).get("ID", image)
    assert image, "".join(log)
    try:
        container = docker_api.create_container(
            image, ["python3", "-c", "import tinyw; print(tinyw.X)"], network_disabled=True
        )
        try:
            docker_api.start(container)
            assert docker_api.wait(container, timeout=60)["StatusCode"] == 0
            assert docker_api.logs(container).strip() == b"1"
        finally:
            docker_api.remove_container(container, force=True)
    finally:
        docker_api.remove_image(image, force=True)
