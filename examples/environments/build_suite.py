#!/usr/bin/env python3
"""Build the environments example: a suite whose tasks need a package the base image lacks.

Sources (committed)::

    src/<id>/task.json           kind, environment, timeout_s, tags, hidden_tests
    src/<id>/prompt.md           the issue the agent reads
    src/<id>/repo/               the fixture repository
    src/<id>/hidden/             hidden test files at repository-relative paths
    src/<id>/gold.diff           the reference patch
    environments/<name>/         the environment's build context: Dockerfile, install
                                 script and requirements.txt (wheels pinned by SHA-256)
    controls.template.yaml       the controls, without the suite digest

Outputs (git-ignored; the builder owns them)::

    suite/tasks.jsonl                    one line per task, sorted by id, no pins yet
    suite/fixtures/<id>.tar              reproducible tars (the quickstart's packer)
    suite/hidden/<id>.tar
    suite/environments/<name>/           environments/<name>/ plus wheels/: the wheelhouse
    patches/gold/<id>.diff
    controls.yaml                        the template, copied

The wheelhouse is fetched on the host with ``pip download --no-deps --only-binary=:all:
--require-hashes`` (only the package indexes are reachable here, and the image build must
also work with ``--network none``); a wheel already in place with its pinned digest is
kept, so rebuilding needs no network. Then, from the repository root::

    .venv/bin/deltarun build examples/environments/controls.yaml --network none
    .venv/bin/deltarun run examples/environments/controls.yaml --out runs/envdemo

``deltarun build`` builds the environment on the sandbox base, pins its context digest
and image ID in every task line, and seals the suite into controls.yaml. Run this script
with the venv's python (``make envdemo`` does): its pip downloads the wheels.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEYS = frozenset({"kind", "environment", "timeout_s", "tags", "hidden_tests"})
PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


def _quickstart() -> Any:
    """The quickstart's builder, for its reproducible tars and atomic writes."""
    path = HERE.parent / "quickstart" / "build_suite.py"
    spec = importlib.util.spec_from_file_location("quickstart_build_suite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QS = _quickstart()


class BuildError(Exception):
    """A source is incomplete or inconsistent; the message names it."""


def build_task(task_dir: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The task line and its files (paths relative to the output folder)."""
    task_id = task_dir.name
    meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    if set(meta) != KEYS:
        raise BuildError(f"{task_id}: task.json needs exactly the keys {sorted(KEYS)}")
    for rel in QS._hidden_test_paths(task_id, meta["hidden_tests"]):
        if not (task_dir / "hidden" / rel).is_file():
            raise BuildError(f"{task_id}: hidden_tests names {rel}, which is not in hidden/")
    repo, hidden = QS.make_tar(task_dir / "repo"), QS.make_tar(task_dir / "hidden")
    line = {
        "id": task_id,
        "kind": meta["kind"],
        "prompt": (task_dir / "prompt.md").read_text(encoding="utf-8").strip(),
        "repo": f"fixtures/{task_id}.tar",
        "repo_sha256": QS.sha256_hex(repo),
        "hidden": f"hidden/{task_id}.tar",
        "hidden_sha256": QS.sha256_hex(hidden),
        "hidden_tests": meta["hidden_tests"],
        "environment": meta["environment"],
        "timeout_s": meta["timeout_s"],
        "size_bucket": QS.size_bucket(task_dir / "repo"),
        "tags": meta["tags"],
    }
    files = {
        f"suite/{line['repo']}": repo,
        f"suite/{line['hidden']}": hidden,
        f"patches/gold/{task_id}.diff": (task_dir / "gold.diff").read_bytes(),
    }
    return line, files


def pinned_wheels(requirements: Path) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of every pinned line of a requirements file."""
    pins = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            match = PIN.match(line)
            if match is None:
                raise BuildError(f"{requirements}: {line!r} is not 'name==version --hash=...'")
            pins.append((match[1], match[2], match[3]))
    return pins


def wheelhouse(requirements: Path, have: Path) -> dict[str, bytes]:
    """The pinned wheels by file name: those already in ``have`` with their digest, the
    rest fetched with pip (checked against the pins by --require-hashes)."""
    pins = pinned_wheels(requirements)
    wanted = {digest for _, _, digest in pins}
    found: dict[str, bytes] = {}
    for path in sorted(have.glob("*.whl")) if have.is_dir() else []:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() in wanted:
            found[path.name] = data
    if len(found) == len(pins):
        return found
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        command += ["--only-binary=:all:", "--require-hashes", "-r", str(requirements)]
        done = subprocess.run([*command, "-d", tmp], capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise BuildError(f"pip download of {requirements} failed: {tail}")
        return {path.name: path.read_bytes() for path in sorted(Path(tmp).glob("*.whl"))}


def environment_files(source: Path, out: Path) -> dict[str, bytes]:
    """An environment's build context: its committed files plus wheels/."""
    name = source.name
    files = {
        f"suite/environments/{name}/{rel}": path.read_bytes()
        for rel, path in QS.tree_entries(source)
        if path.is_file()
    }
    have = out / "suite" / "environments" / name / "wheels"
    for wheel, data in wheelhouse(source / "requirements.txt", have).items():
        files[f"suite/environments/{name}/wheels/{wheel}"] = data
    return files


def prune(out: Path, keep: set[str]) -> None:
    """Remove what the builder's folders hold beyond ``keep`` (paths relative to ``out``)."""
    for owned in ("suite", "patches"):
        root = out / owned
        for path in sorted(root.rglob("*"), reverse=True) if root.is_dir() else []:
            rel = path.relative_to(out).as_posix()
            if path.is_dir() and not path.is_symlink():
                if not any(k.startswith(rel + "/") for k in keep):
                    shutil.rmtree(path)
            elif rel not in keep:
                path.unlink()


def build(out: Path = HERE) -> list[dict[str, Any]]:
    """Build everything into ``out``; tasks.jsonl last, so it never names a missing file."""
    files: dict[str, bytes] = {}
    lines = []
    for task_dir in sorted(p for p in (HERE / "src").iterdir() if p.is_dir()):
        line, task_files = build_task(task_dir)
        lines.append(line)
        files.update(task_files)
    for name in sorted({line["environment"] for line in lines}):
        source = HERE / "environments" / name
        if not (source / "Dockerfile").is_file():
            raise BuildError(f"environment {name!r}: {source}/Dockerfile not found")
        files.update(environment_files(source, out))
    files["controls.yaml"] = (HERE / "controls.template.yaml").read_bytes()
    prune(out, set(files))
    for rel, data in sorted(files.items()):
        QS._write(out / rel, data)
    text = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in lines)
    QS._write(out / "suite" / "tasks.jsonl", text.encode("utf-8"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: here)")
    args = parser.parse_args(argv)
    try:
        lines = build(args.out.resolve())
    except (BuildError, OSError) as exc:
        print(f"build_suite: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(lines)} tasks to {args.out / 'suite' / 'tasks.jsonl'}")
    print("next: deltarun build examples/environments/controls.yaml --network none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
