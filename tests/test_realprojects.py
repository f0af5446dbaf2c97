"""Real projects as they are, end to end on the real engine: SWE-bench-format instances over
seven PyPI projects (``tests/realprojects``: a flat package, src/ layouts declared three
ways, pytest-cov options in tox.ini and setup.cfg, ``[tool:pytest]``, shared conftest
fixtures, a namespace package, one project installed by its spec) imported with
``--specs``, their environments built, then validated: every gold patch resolves and every
bare fixture does not; the instance broken on purpose (its settings name a plugin its
spec does not give) is ``setup-broken`` with the option named and the fix to try.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realprojects.build import build

pytestmark = pytest.mark.docker

# Validated on a Celery worker too: the project its spec installs, and the broken instance.
CELERY = ("pallets__click-1", "jquast__wcwidth-nocov-1")


def test_a_real_project_suite_imports_builds_and_validates(
    tmp_path: Path, redis_server: Any
) -> None:
    """On the local pool; then two of the instances again with every check recorded by a
    real Celery worker (the other seven differ in layout and settings, not in where they
    run)."""
    from tests.distributed_support import start_worker

    data = build(tmp_path / "data")
    instances = tmp_path / "all.jsonl"
    instances.write_text(data["instances"].read_text() + data["broken"].read_text())
    out = imported_and_built(instances, data, tmp_path / "suite")
    local = verdicts_of(run_cli("validate", str(out / "controls.yaml"), "-j", "2"), out)
    # On a real Celery worker: the instance its spec installs and the broken one, imported
    # and built again as a suite of their own (its environments are the ones just built).
    on_workers = tmp_path / "on-workers.jsonl"
    on_workers.write_text(
        "".join(
            line + "\n"
            for line in instances.read_text().splitlines()
            if json.loads(line)["instance_id"] in CELERY
        )
    )
    out2 = imported_and_built(on_workers, data, tmp_path / "suite-on-workers")
    worker = start_worker(redis_server, tmp_path / "worker.log", "-c", "2")
    try:
        celery = run_cli("validate", str(out2 / "controls.yaml"), "--broker", redis_server.url)
    finally:
        worker.stop()
    assert verdicts_of(celery, out2) == {i: local[i] for i in CELERY}
    verdicts = dict(local)
    broken = verdicts.pop("jquast__wcwidth-nocov-1")
    assert len(verdicts) == 8 and all(v == "valid" for v, _ in verdicts.values()), verdicts
    assert broken[0] == "setup-broken", broken
    assert "unrecognized arguments" in broken[1] and "--cov" in broken[1]
    assert "add pytest-cov to the environment" in broken[1]


def imported_and_built(instances: Path, data: dict[str, Path], out: Path) -> Path:
    """``import swebench`` of ``instances`` with the corpus's repositories and specs into
    ``out``, then ``build``; the suite folder."""
    imported = run_cli(
        "import", "swebench", str(instances), "--repos", str(data["repos"]),
        "--out", str(out), "--specs", str(data["specs"]),
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    built = run_cli("build", str(out / "controls.yaml"))
    assert built.returncode == 0, built.stderr
    return out


def verdicts_of(result: Any, out: Path) -> dict[str, tuple[str, str]]:
    """Each task's verdict and detail from the validation ``result`` wrote."""
    assert result.returncode == 1, result.stderr  # the broken instance
    document = json.loads((out / "suite" / "validation.json").read_text())
    return {t["id"]: (t["verdict"], t["detail"]) for t in document["tasks"]}
