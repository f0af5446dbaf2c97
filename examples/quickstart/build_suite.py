#!/usr/bin/env python3
"""Build the quickstart suite and the arms' patch directories from ``src/``.

Every task lives in ``src/<id>/``:

``task.json``
    Metadata merged into the task line (``kind``, ``tags``, and either
    ``image``/``timeout_s``/``size_bucket``/``hidden_tests`` for a repository
    task or ``expect``/``schema``/``metrics``/``deadline_s`` for an answer
    task). The prompt may be given here as ``prompt`` or, more readably, in
    ``prompt.md``.
``repo/``
    The fixture repository (repository tasks only).
``hidden/``
    Hidden test files at repository-relative paths (ordinary repository
    tasks only; negative tasks are never verified and have none).
``gold.diff`` / ``gold.abstain``
    The reference arm: a patch for ordinary repository tasks, a one-line
    abstention reason for negative tasks. Answerable answer tasks get
    ``<id>.answer.json`` generated from ``expect``.
``candidate.diff`` | ``candidate.abstain`` | ``candidate.answer.json``
    The recorded candidate agent's output, copied verbatim (at most one;
    none means the agent produced nothing).

Outputs, byte-identical on every run (the default ``--out`` is this
script's directory)::

    suite/tasks.jsonl            one task per line, sorted by id
    suite/fixtures/<id>.tar      src/<id>/repo, files at the archive root
    suite/hidden/<id>.tar        src/<id>/hidden
    patches/gold/<id>.*          reference arm
    patches/candidate/<id>.*     recorded candidate arm

``suite/`` and ``patches/`` are built, not committed: they are git-ignored,
and ``make examples`` (which ``make demo`` runs first) or the tests that need
them build them from ``src/``. The builder is deterministic, so the suite
digest pinned in ``controls.yaml`` (and in ``examples/openai/*.yaml``, whose
``suite/`` is ``--out examples/openai`` of the same sources) stays
valid and is the check that the sources have not drifted: if an edit under
``src/`` changes ``tasks.jsonl``, the run stops on a digest mismatch until the
pins are updated.

Archives are reproducible: members sorted by path, directories included,
mtime 0, owner 0:0 with empty names, modes 0o755/0o644, GNU format. Output
files are written with mode 0o644, each atomically and only when its bytes
change; files in the builder's own directories (``suite/fixtures``,
``suite/hidden``, ``patches/gold``, ``patches/candidate``) that the sources no
longer produce are removed. Rebuilding an up-to-date tree therefore writes
nothing, and a concurrent reader never sees a partly written file.
Only the standard library is used.

The same builder builds any suite laid out this way: ``--src DIR`` reads the
tasks from *DIR* instead of ``src/`` here (``make pack30`` builds
``examples/pack30`` with ``--src examples/pack30/src --out examples/pack30``).

Usage: ``python3 examples/quickstart/build_suite.py [--src DIR] [--out DIR]``
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"

ID_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
KINDS = ("ordinary", "negative")
METRICS = ("exact_match", "json_schema_ok", "within_deadline")

# Never packed: caches a local test run may leave behind.
SKIP_DIR_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
SKIP_SUFFIXES = (".pyc", ".pyo")

# Size bucket of a fixture by the total bytes of its regular files:
# below 3600 is "s", below 4400 is "m", anything larger is "l".
SIZE_LIMITS: tuple[tuple[int, str], ...] = ((3600, "s"), (4400, "m"))

# Keys each kind of task.json may hold (``prompt`` may also come from prompt.md).
REPO_KEYS = frozenset(
    {"prompt", "kind", "image", "timeout_s", "size_bucket", "tags", "hidden_tests"}
)
ANSWER_KEYS = frozenset({"prompt", "kind", "expect", "schema", "metrics", "deadline_s", "tags"})

# Output locations relative to --out; the builder owns exactly these.
OWNED_DIRS = ("suite/fixtures", "suite/hidden", "patches/gold", "patches/candidate")
TASKS_FILE = "suite/tasks.jsonl"
FILE_MODE = 0o644


class BuildError(Exception):
    """A task source is incomplete or inconsistent; the message names it."""


def tree_entries(root: Path) -> list[tuple[str, Path]]:
    """Return ``(relative posix path, path)`` for every packable entry, sorted by path.

    Lexicographic order puts every directory before its contents.
    """
    entries = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part in SKIP_DIR_NAMES for part in rel.parts) or path.name.endswith(SKIP_SUFFIXES):
            continue
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            raise BuildError(f"{path}: only regular files and directories can be packed")
        entries.append((rel.as_posix(), path))
    return sorted(entries)


def make_tar(root: Path) -> bytes:
    """Pack the tree under *root* into a reproducible tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel, path in tree_entries(root):
            info = tarfile.TarInfo(rel)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.type = tarfile.REGTYPE
                info.mode = 0o644
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def size_bucket(root: Path) -> str:
    """Classify a fixture as "s", "m" or "l" by the bytes of its files."""
    total = sum(path.stat().st_size for _, path in tree_entries(root) if path.is_file())
    for limit, bucket in SIZE_LIMITS:
        if total < limit:
            return bucket
    return "l"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_prompt(task_dir: Path, meta: dict[str, Any]) -> str:
    prompt_file = task_dir / "prompt.md"
    if "prompt" in meta and prompt_file.exists():
        raise BuildError(f"{task_dir.name}: prompt given both in task.json and prompt.md")
    if "prompt" in meta:
        prompt = str(meta["prompt"])
    elif prompt_file.exists():
        prompt = prompt_file.read_text(encoding="utf-8")
    else:
        raise BuildError(f"{task_dir.name}: no prompt (task.json 'prompt' or prompt.md)")
    prompt = prompt.strip()
    if not prompt:
        raise BuildError(f"{task_dir.name}: empty prompt")
    return prompt


def _read_abstain(path: Path) -> bytes:
    text = path.read_text(encoding="utf-8").strip()
    if not text or "\n" in text:
        raise BuildError(f"{path}: an abstention reason must be exactly one non-empty line")
    return (text + "\n").encode("utf-8")


def _hidden_test_paths(task_id: str, declared: Any) -> list[str]:
    """The files the declared tests live in (test ids are ``file`` or ``file::name``)."""
    if not isinstance(declared, list) or not declared:
        raise BuildError(f"{task_id}: hidden_tests must be a non-empty list of test ids")
    if not all(isinstance(entry, str) and entry for entry in declared):
        raise BuildError(f"{task_id}: hidden_tests must hold test ids like tests/test_x.py")
    return list(dict.fromkeys(entry.split("::", 1)[0] for entry in declared))


def _check_common(task_id: str, meta: dict[str, Any], allowed: frozenset[str]) -> None:
    extra = sorted(set(meta) - allowed)
    if extra:
        raise BuildError(f"{task_id}: unexpected task.json keys {extra}")
    if meta.get("kind") not in KINDS:
        raise BuildError(f"{task_id}: kind must be one of {KINDS}")
    tags = meta.get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise BuildError(f"{task_id}: tags must be a list of strings")


def build_task(
    task_dir: Path,
) -> tuple[dict[str, Any], dict[str, bytes], dict[str, bytes], dict[str, bytes]]:
    """Return the task line and the files for fixtures/hidden, gold and candidate.

    The second element maps suite-relative paths to bytes; the last two map
    file names inside ``patches/<arm>/`` to bytes.
    """
    task_id = task_dir.name
    if not ID_PATTERN.match(task_id):
        raise BuildError(f"{task_id}: ids are lowercase letters, digits and dashes")
    meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    prompt = _read_prompt(task_dir, meta)
    kind = meta.get("kind")
    repo_dir, hidden_dir = task_dir / "repo", task_dir / "hidden"
    suite_files: dict[str, bytes] = {}
    gold: dict[str, bytes] = {}
    candidate: dict[str, bytes] = {}

    if repo_dir.is_dir():
        _check_common(task_id, meta, REPO_KEYS)
        for key in ("image", "timeout_s", "size_bucket"):
            if key not in meta:
                raise BuildError(f"{task_id}: repository task needs {key!r}")
        bucket = size_bucket(repo_dir)
        if meta["size_bucket"] != bucket:
            raise BuildError(
                f"{task_id}: size_bucket is {meta['size_bucket']!r}, the fixture is {bucket!r}"
            )
        repo_tar = make_tar(repo_dir)
        line = {
            "id": task_id,
            "kind": kind,
            "prompt": prompt,
            "repo": f"fixtures/{task_id}.tar",
            "repo_sha256": sha256_hex(repo_tar),
            "image": meta["image"],
            "timeout_s": meta["timeout_s"],
            "size_bucket": bucket,
            "tags": meta["tags"],
        }
        suite_files[line["repo"]] = repo_tar
        if kind == "ordinary":
            if not hidden_dir.is_dir() or "hidden_tests" not in meta:
                raise BuildError(
                    f"{task_id}: an ordinary repository task needs hidden/ and hidden_tests"
                )
            for rel in _hidden_test_paths(task_id, meta["hidden_tests"]):
                if not (hidden_dir / rel).is_file():
                    raise BuildError(
                        f"{task_id}: hidden_tests names {rel}, which is not in hidden/"
                    )
            hidden_tar = make_tar(hidden_dir)
            line.update(
                hidden=f"hidden/{task_id}.tar",
                hidden_sha256=sha256_hex(hidden_tar),
                hidden_tests=meta["hidden_tests"],
            )
            suite_files[line["hidden"]] = hidden_tar
            gold_diff = task_dir / "gold.diff"
            if not gold_diff.is_file():
                raise BuildError(f"{task_id}: missing gold.diff")
            gold[f"{task_id}.diff"] = gold_diff.read_bytes()
        else:
            if hidden_dir.exists() or "hidden_tests" in meta:
                raise BuildError(
                    f"{task_id}: negative tasks are never verified; give them no hidden tests"
                )
    else:
        _check_common(task_id, meta, ANSWER_KEYS)
        for key in ("expect", "schema", "metrics", "deadline_s"):
            if key not in meta:
                raise BuildError(f"{task_id}: answer task needs {key!r}")
        if not meta["metrics"] or not set(meta["metrics"]) <= set(METRICS):
            raise BuildError(f"{task_id}: metrics must be a non-empty subset of {METRICS}")
        line = {
            "id": task_id,
            "kind": kind,
            "prompt": prompt,
            "expect": meta["expect"],
            "schema": meta["schema"],
            "metrics": meta["metrics"],
            "deadline_s": meta["deadline_s"],
            "tags": meta["tags"],
        }
        if kind == "ordinary":
            answer = json.dumps(meta["expect"], sort_keys=True, separators=(",", ":"))
            gold[f"{task_id}.answer.json"] = (answer + "\n").encode("utf-8")
        elif meta["expect"] is not None:
            raise BuildError(f"{task_id}: a negative answer task has no oracle; set expect to null")

    if kind == "negative":
        abstain = task_dir / "gold.abstain"
        if not abstain.is_file():
            raise BuildError(f"{task_id}: a negative task needs gold.abstain")
        gold[f"{task_id}.abstain"] = _read_abstain(abstain)

    recorded = sorted(p for p in task_dir.glob("candidate.*") if p.is_file())
    if len(recorded) > 1:
        raise BuildError(f"{task_id}: more than one candidate output: {[p.name for p in recorded]}")
    for path in recorded:
        suffix = path.name[len("candidate") :]
        if suffix == ".abstain":
            candidate[task_id + suffix] = _read_abstain(path)
        elif suffix == ".diff" and repo_dir.is_dir():
            candidate[task_id + suffix] = path.read_bytes()
        elif suffix == ".answer.json" and not repo_dir.is_dir():
            json.loads(path.read_text(encoding="utf-8"))  # must at least be JSON
            candidate[task_id + suffix] = path.read_bytes()
        else:
            raise BuildError(f"{task_id}: {path.name} does not fit this kind of task")
    return line, suite_files, gold, candidate


def _write(path: Path, data: bytes) -> None:
    """Make *path* a 0o644 file holding *data*: atomically, and only if it does not already."""
    with contextlib.suppress(OSError):
        if (
            not path.is_symlink()
            and path.is_file()
            and path.stat().st_mode & 0o777 == FILE_MODE
            and path.read_bytes() == data
        ):
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _prune(out: Path, keep: set[str]) -> None:
    """Remove whatever the owned directories hold beyond the *keep* paths (relative to *out*)."""
    needed_dirs = {parent.as_posix() for rel in keep for parent in Path(rel).parents}
    for owned in OWNED_DIRS:
        root = out / owned
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            root.unlink()
        root.mkdir(parents=True, exist_ok=True)
        # Deepest first, so a directory's contents are handled before it.
        for path in sorted(root.rglob("*"), reverse=True):
            rel = path.relative_to(out).as_posix()
            if path.is_dir() and not path.is_symlink():
                if rel not in needed_dirs:
                    shutil.rmtree(path, ignore_errors=True)
            elif rel not in keep:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def build(
    out: Path = HERE, src: Path = SRC, only: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Build every task under *src* (or the tasks *only* names) into *out*; return the
    task lines.

    Afterwards the owned directories under *out* hold exactly the built files,
    and ``suite/tasks.jsonl`` is written last, so a complete ``tasks.jsonl``
    never names an archive that is not there yet.
    """
    task_dirs = sorted(p for p in src.iterdir() if p.is_dir())
    if only:
        unknown = sorted(set(only) - {d.name for d in task_dirs})
        if unknown:
            raise BuildError(f"--only: no task {', '.join(unknown)} under {src}")
        task_dirs = [d for d in task_dirs if d.name in only]
    if not task_dirs:
        raise BuildError(f"no tasks under {src}")
    results = [build_task(d) for d in task_dirs]

    files: dict[str, bytes] = {}
    lines = []
    for line, suite_files, gold, candidate in results:
        for rel, data in suite_files.items():
            files[f"suite/{rel}"] = data
        for name, data in gold.items():
            files[f"patches/gold/{name}"] = data
        for name, data in candidate.items():
            files[f"patches/candidate/{name}"] = data
        lines.append(line)
    _prune(out, set(files))
    for rel, data in sorted(files.items()):
        _write(out / rel, data)
    text = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in lines)
    _write(out / TASKS_FILE, text.encode("ascii"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--src",
        type=Path,
        default=SRC,
        help="directory holding one <id>/ per task (default: src/ next to this script)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory to write suite/ and patches/ into (default: the parent of --src, "
        "so next to this script for the quickstart, where they are git-ignored and "
        "controls.yaml expects them)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=(),
        metavar="ID",
        help="build only these tasks of --src (the CI example builds four of the quickstart's)",
    )
    args = parser.parse_args(argv)
    src = args.src.resolve()
    out = src.parent if args.out is None else args.out.resolve()
    if not src.is_dir():
        print(f"build_suite: {src} is not a directory", file=sys.stderr)
        return 1
    try:
        lines = build(out, src, args.only)
    except BuildError as exc:
        print(f"build_suite: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"build_suite: cannot write under {out}: {exc}", file=sys.stderr)
        return 1
    digest = sha256_hex((out / TASKS_FILE).read_bytes())
    kinds: dict[str, int] = {}
    for line in lines:
        label = f"{'repo' if 'repo' in line else 'answer'}/{line['kind']}"
        kinds[label] = kinds.get(label, 0) + 1
    summary = ", ".join(f"{n} {label}" for label, n in sorted(kinds.items()))
    print(f"wrote {len(lines)} tasks ({summary}) to {out / TASKS_FILE}")
    print(f"tasks.jsonl sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
