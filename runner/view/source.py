"""A run directory as the viewer reads it: the ledger indexed by line (each record read
again, on demand, by its byte offset), the task prompts and tags the run keeps
(``task_texts.jsonl``; only a run recorded before that file existed has them read from the
suite, where its run.json says the controls were), the report's
headline, checklist, pins and setup warnings (each with the trials behind it), the
verdicts the last ``replay --reverify`` changed (``reverify.json``), and whether the run is
still being written.

Read-only and defensive: a ledger line that is not a ``Trial`` is indexed with a note, a
torn last line (a run still writing) is shown as in progress, missing task texts or a
missing report leave their part of the page empty. Only a folder without ``run.json`` is an error.
"""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from runner.bounded_input import TASKS_MAX_BYTES, open_regular, read_capped
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import UserError
from runner.paths import inside
from runner.records import SHA256_RE, Trial
from runner.store.changes import CHANGES
from runner.store.rundir import (
    LEDGER,
    LEDGER_BYTES,
    RECORD_BYTES,
    RUN_FILE,
    SESSIONS,
    RunDir,
    TaskText,
    texts_of,
)
from runner.tar_headers import CheckedTarInfo, HeaderRefused
from runner.view.ledger_lines import detail, parse, summary
from runner.view.matrix import build_index
from runner.view.setup_links import linked, signs
from runner.view.text import TEXT_CHARS, shown_text

SESSION_FILE_CHARS = 64_000
SESSION_FILES = 200
SESSION_ARCHIVE_BYTES = 256 << 20  # a session archive read (gzip'd), and its tar stream:
SESSION_STREAM_BYTES = 1 << 30  # a member ending past this is not reached
CHANGES_MAX = 100_000  # entries of reverify.json read


class RunSource:
    """One run directory, its index cached until the ledger changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not (path / RUN_FILE).is_file():
            raise UserError(f"{path}: not a run directory (no {RUN_FILE})")
        self.meta = RunDir(path).meta().to_json()
        self.tasks = _task_info(self.meta, RunDir(path).task_texts())
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._index: dict[str, Any] = {}
        self._offsets: dict[int, int] = {}
        self._signs: tuple[tuple[int, ...] | None, list[tuple[int, set[str]]]] = (None, [])
        self.torn = False

    def _ledger_stamp(self) -> tuple[int, ...]:
        """The ledger's and reverify.json's sizes and times: the index is rebuilt when
        either changes."""
        stamp: list[int] = []
        for name in (LEDGER, CHANGES):
            try:
                stat = (self.path / name).stat()
            except FileNotFoundError:
                stamp += [-1, -1]
                continue
            stamp += [stat.st_size, stat.st_mtime_ns]
        return tuple(stamp)

    def index(self) -> dict[str, Any]:
        """The matrix's data (``matrix.build_index``), rebuilt when the ledger has grown or
        reverify.json changed."""
        with self._lock:
            stamp = self._ledger_stamp()
            if stamp != self._stamp:
                reverified = _reverified(self.path / CHANGES)
                changed = reverified["changed"] if reverified else {}
                entries = list(self._scan(changed))
                self._index = build_index(self.meta, entries, self.tasks, reverified)
                self._stamp = stamp
            return self._index

    def _scan(self, changed: dict[str, dict[str, str]]) -> Any:
        """Each ledger line's summary; the first record of a job ``changed`` names (the one
        re-verified) carries its change as ``rv``."""
        offsets: dict[int, int] = {}
        self.torn = False
        path = self.path / LEDGER
        if not path.is_file():
            self._offsets = offsets
            return
        marked: set[str] = set()
        offset = 0
        for number, raw in enumerate(self._ledger(), start=1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            offsets[number] = start
            data, note = parse(raw.decode("utf-8", "replace"))
            if not raw.endswith(b"\n"):
                self.torn = True
                note = "the last line is not finished (the run is still writing it)"
            entry = summary(number, data, note)
            job = data.get("job_id")
            if isinstance(job, str) and job in changed and job not in marked:
                marked.add(job)
                entry["rv"] = changed[job]
            yield entry
        self._offsets = offsets

    def _ledger_file(self) -> AbstractContextManager[BinaryIO]:
        """The ledger open as input: held inside the run directory, a regular file."""
        held = inside(self.path, LEDGER, file=self.path, field=LEDGER)
        return open_regular(held, LEDGER_BYTES, "a ledger")

    def _ledger(self) -> Iterator[bytes]:
        """The ledger's lines, each of at most ``RECORD_BYTES``: one endless line ends the
        read (it is not held in memory)."""
        with self._ledger_file() as handle:
            while raw := handle.readline(RECORD_BYTES + 1):
                if len(raw) > RECORD_BYTES:
                    return
                yield raw

    def trial(self, number: int) -> dict[str, Any] | None:
        """The detail of the record on ledger line ``number``, or None if there is none."""
        self.index()
        offset = self._offsets.get(number)
        if offset is None:
            return None
        with self._ledger_file() as handle:
            handle.seek(offset)
            line = handle.readline(RECORD_BYTES).decode("utf-8", "replace")
        data, _ = parse(line)
        return detail(number, line, self._session(data.get("session_sha256")))

    def _session(self, digest: Any) -> list[dict[str, Any]] | None:
        """An installed agent's session files (text, each cut), or None without one."""
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            return None
        path = self.path / SESSIONS / f"{digest}.tar.gz"
        if not path.is_file():
            return [{"name": path.name, "text": "(session archive not in this run directory)"}]
        files: list[dict[str, Any]] = []
        try:  # a run directory is input: held inside it, its headers bounded before a read
            held = inside(self.path, f"{SESSIONS}/{path.name}", file=self.path, field="session")
            with (
                open_regular(held, SESSION_ARCHIVE_BYTES, "a session archive") as raw,
                tarfile.open(fileobj=raw, mode="r:gz", tarinfo=CheckedTarInfo) as archive,
            ):
                for member in archive:
                    # Passing over a member decompresses it: stop past the stream's cap.
                    end = member.offset_data + member.size
                    if len(files) >= SESSION_FILES or end > SESSION_STREAM_BYTES:
                        break
                    if not member.isfile():
                        continue
                    handle = archive.extractfile(member)
                    data = handle.read(SESSION_FILE_CHARS * 4) if handle else b""
                    text = shown_text(data.decode("utf-8", "replace"), SESSION_FILE_CHARS)
                    files.append({"name": member.name[:300], **text, "size": member.size})
        except (tarfile.TarError, OSError, EOFError, ValueError, HeaderRefused, UserError) as exc:
            said = f"(unreadable session archive: {str(exc)[:300]})"
            files.append({"name": path.name, "text": said})
        return files

    def _setup_signs(self) -> list[tuple[int, set[str]]]:
        """Each ledger line (the first record of its job) with the setup signs it shows
        (``setup_links.signs``), read again when the ledger changes; lines that are not
        valid records are left out."""
        stamp = self._ledger_stamp()
        if self._signs[0] == stamp:
            return self._signs[1]
        found: list[tuple[int, set[str]]] = []
        try:
            controls = RunDir(self.path).stored_controls()
            seen: set[str] = set()
            for number, raw in enumerate(self._ledger(), start=1):
                try:
                    trial = Trial.model_validate_json(raw)
                except ValidationError:
                    continue
                if trial.job_id not in seen:
                    seen.add(trial.job_id)
                    keys = signs(controls, trial)
                    if keys:
                        found.append((number, keys))
        except (OSError, UserError, ValueError):
            found = []
        self._signs = (stamp, found)
        return found

    def run_page(self) -> dict[str, Any]:
        """The run page's data: headline, checklist, pins, setup warnings with their trials,
        the last re-verification, progress."""
        index = self.index()
        report = _read_json(self.path / "report.json")
        pins = report.get("pins") if isinstance(report.get("pins"), dict) else None
        warnings = _list(report.get("setup_warnings"))[:1000]
        expected = len(self.tasks) * len(self.meta.get("arms") or []) * _repeats(self.path)
        recorded = len(index["trials"])
        return {
            "run_id": self.meta.get("run_id"),
            "protocol_id": self.meta.get("protocol_id"),
            "channel": self.meta.get("channel"),
            "control": self.meta.get("control_arm"),
            "arms": self.meta.get("arms"),
            "created_at": self.meta.get("created_at"),
            "recorded": recorded,
            "expected": expected,
            "in_progress": self.torn or (not report and recorded < expected),
            "has_report": bool(report),
            "notes": index["notes"],
            "verdict": report.get("verdict"),
            "stamp": report.get("stamp"),
            "headline": _headline(self.path / "report.md"),
            "checklist": report.get("checklist")
            if isinstance(report.get("checklist"), list)
            else [],
            "pins": pins if pins is not None else _meta_pins(self.meta),
            "setup_warnings": linked(warnings, self._setup_signs() if warnings else []),
            "reverify": index["reverify"],
        }


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _reverified(path: Path) -> dict[str, Any] | None:
    """What ``replay --reverify`` last kept (``runner.run.reverify``): when it ran, how many
    verdicts it re-ran, and by job id each changed one's recorded and new outcome; None
    without the file, a note when it is not what it should be."""
    if not path.is_file():
        return None
    data = _read_json(path)
    raw = data.get("changed")
    changed = {
        job[:100]: {"was": _short(change.get("was")), "now": _short(change.get("now"))}
        for job, change in list(raw.items() if isinstance(raw, dict) else ())[:CHANGES_MAX]
        if isinstance(change, dict)
    }
    checked = data.get("checked")
    note = "" if isinstance(raw, dict) else f"{path.name}: not what replay --reverify writes"
    return {
        "ran_at": _short(data.get("ran_at")),
        "checked": checked if isinstance(checked, int) and not isinstance(checked, bool) else None,
        "changed": changed,
        "note": note,
    }


def _short(value: Any) -> str:
    return value[:60] if isinstance(value, str) else ""


KEPT_BYTES = 64 << 20  # a report file the viewer reads back
KEPT_BOUNDS = JsonBounds(max_bytes=KEPT_BYTES, max_depth=64, max_items=50_000_000)


def _kept_text(path: Path) -> str | None:
    """A file of the run directory read as input: held inside its folder (no link out), a
    regular file of at most ``KEPT_BYTES``; None when it cannot be read so."""
    try:
        held = inside(path.parent, path.name, file=path.parent, field=path.name)
        return read_capped(held, KEPT_BYTES, path.name).decode("utf-8", "replace")
    except (OSError, UserError):
        return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = loads_bounded((_kept_text(path) or "").encode(), KEPT_BOUNDS)
    except BoundsError:
        return {}
    return data if isinstance(data, dict) else {}


def _headline(path: Path) -> list[str]:
    """The lines of report.md's Headline section, as written."""
    text = _kept_text(path)
    if text is None:
        return []
    lines: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Headline"
            continue
        if inside and line.strip():
            lines.append(shown_text(line, 4000)["text"])
    return lines[:200]


def _meta_pins(meta: dict[str, Any]) -> dict[str, Any]:
    keys = ("run_id", "protocol_id", "protocol_sha256", "suite_sha256", "channel",
            "control_arm", "image_digests", "agent_dir_digests", "deltarun_version",
            "python_version")  # fmt: skip
    return {key: meta[key] for key in keys if meta.get(key) not in (None, "", {})}


def _repeats(path: Path) -> int:
    try:
        return max(1, RunDir(path).stored_controls().runtime.repeats)
    except (UserError, OSError, ValueError, AttributeError):
        return 1


def _task_info(
    meta: dict[str, Any], texts: dict[str, TaskText] | None
) -> dict[str, dict[str, Any]]:
    """run.json's tasks (id, kind, grading), with prompt and tags from the run's
    task_texts.jsonl (``texts``); a run recorded before that file existed (``texts`` None)
    has them from the suite's tasks.jsonl when its controls are still where run.json says
    they were."""
    info = {
        str(task.get("id")): dict(task)
        for task in meta.get("tasks") or []
        if isinstance(task, dict)
    }
    if texts is None:
        texts = texts_of(_suite_lines(str(meta.get("controls_path") or "")))
    for task_id, entry in info.items():
        text = texts.get(task_id)
        if text is not None:
            entry["prompt"] = text.prompt or None
            entry["tags"] = [tag[:100] for tag in text.tags]
    return info


def _suite_lines(controls_path: str) -> list[str]:
    """The lines of the suite's tasks.jsonl, found through run.json's ``controls_path``: read
    only for a run directory recorded before task_texts.jsonl existed."""
    if not controls_path:
        return []
    controls = Path(controls_path)
    try:
        from runner.config.loader import parse_controls

        raw = read_capped(controls, KEPT_BYTES, "controls").decode("utf-8", "replace")
        suite = parse_controls(raw, str(controls)).suite
        tasks = inside(controls.parent, suite.file, file=controls, field="suite.file")
        text = read_capped(tasks, TASKS_MAX_BYTES, "tasks.jsonl").decode("utf-8", "replace")
    except (OSError, UserError, ValueError):
        return []
    return text.split("\n")  # as tasks.jsonl is split: a U+2028 in a prompt ends no line


__all__ = ["TEXT_CHARS", "RunSource"]
