"""Forbidden paths, hidden tests and hostile archives."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.adversarial.support import REPORT_PY, hostile
from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, make_suite, repo_task

pytestmark = pytest.mark.docker


def test_forbidden_and_hidden_are_absent_even_through_symlinks(
    tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    fixture = {**ADD_FIXTURE, ".git/config": "[core]\n", "secrets/token": "s3cret\n"}
    script = (
        REPORT_PY
        + r"""
import os, subprocess
seen = subprocess.run(["sh", "-c", "find / \\( -path /proc -o -path /sys -o -path /dev -o "
                       "-path /usr \\) -prune -o -print 2>/dev/null"],
                      capture_output=True, text=True).stdout.splitlines()
reads = {}
for target in ["/baseline/git/HEAD", "/workspace/.git/config", "/workspace/secrets/token"]:
    link = "/tmp/link-" + str(len(reads))
    try:
        os.symlink(target, link)
        reads[target] = open(link).read()[:20]
    except OSError as exc:
        reads[target] = type(exc).__name__
report({"hits": [p for p in seen if "test_hidden" in p or "/.git" in p or "secrets" in p
                 or "s3cret" in p], "reads": reads})
"""
    )
    os_script = f"python3 - <<'EOF'\n{script}\nEOF\n"
    trial = hostile(
        tmp_path,
        docker_api,
        os_script,
        repo=True,
        fixture=fixture,
        tools={"allowlist": [], "forbidden_paths": [".git/", "secrets"]},
    )
    assert trial.error is None
    data: dict[str, Any] = trial.answer or {}
    held(
        "forbidden paths",
        "find the hidden tests, .git/, secrets/; read them through symlinks",
        f"found {data.get('hits')}; reads {data.get('reads')}",
    )
    assert data.get("hits") == []
    assert set(data.get("reads", {}).values()) <= {"FileNotFoundError", "PermissionError"}


def _tar(path: Path, build: Callable[[tarfile.TarFile], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as archive:
        build(archive)


def _member(
    archive: tarfile.TarFile,
    name: str,
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
    data: bytes = b"x",
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


ARCHIVES: dict[str, tuple[Callable[[tarfile.TarFile], None], str]] = {
    "symlink-out": (lambda a: _member(a, "evil", tarfile.SYMTYPE, "/etc/shadow"), "symbolic link"),
    "dotdot-name": (lambda a: _member(a, "../../escape.py"), "escapes"),
    "absolute-name": (lambda a: _member(a, "/etc/cron.d/evil"), "absolute"),
    "hardlink": (lambda a: (_member(a, "a"), _member(a, "b", tarfile.LNKTYPE, "a")), "hard link"),
    "device-node": (lambda a: _member(a, "dev", tarfile.CHRTYPE), "device node"),
    "many-tiny-files": (lambda a: [_member(a, f"f{i}") for i in range(20_001)], "members"),
}


@pytest.mark.parametrize("case", sorted([*ARCHIVES, "huge-sparse"]))
@pytest.mark.parametrize("which", ["fixture", "hidden"])
def test_hostile_archives_are_rejected(
    case: str, which: str, tmp_path: Path, held: Callable[[str, str, str], None]
) -> None:
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
        seal=False,
    )
    target = tmp_path / "suite" / ("fixtures" if which == "fixture" else "hidden") / "t1.tar"
    if case == "huge-sparse":
        # A header that claims 100 GB (as a sparse file would); the data is never read.
        info = tarfile.TarInfo("huge.bin")
        info.size = 100 * 10**9
        target.write_bytes(info.tobuf(format=tarfile.GNU_FORMAT))
        needle = "over the cap"
    else:
        build, needle = ARCHIVES[case]
        _tar(target, build)
    outside = {p for p in tmp_path.parent.iterdir()}
    result = run_cli("seal", str(controls))
    line = result.stderr.strip()
    held(
        f"archive: {case} ({which})",
        f"{case} in the {which} archive",
        f"seal exit {result.returncode}: {line.split('t1.tar: ', 1)[-1]}",
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert str(target) in line and needle in line
    assert {p for p in tmp_path.parent.iterdir()} == outside  # nothing written outside


COPY_OUT = {
    "answer-is-symlink": 'ln -s /etc/passwd "$DELTARUN_ANSWER_FILE"\n',
    "answer-is-fifo": 'mkfifo "$DELTARUN_ANSWER_FILE"\n',
    "answer-fills-io": 'head -c 30000000 /dev/zero > "$DELTARUN_ANSWER_FILE"\n',
}


@pytest.mark.parametrize("case", sorted(COPY_OUT))
def test_hostile_copied_out_files(
    case: str, tmp_path: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    trial = hostile(tmp_path, docker_api, COPY_OUT[case])
    held(
        f"copy-out: {case}",
        COPY_OUT[case].strip(),
        f"{trial.outcome.value}; answer {str(trial.answer)[:30]!r}",
    )
    assert trial.outcome is Outcome.MISS and trial.error is None
    assert trial.answer is None or "root:" not in str(trial.answer)
    assert len(trial.model_dump_json()) < 1 << 20
