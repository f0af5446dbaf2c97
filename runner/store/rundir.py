"""The run directory: stored controls, run metadata and the append-only ledger.

    RUN_DIR/controls.yaml            the controls exactly as run (their bytes, or with the
                                     baseline: --baseline-mode gave an arm)
    RUN_DIR/run.json                 run id, protocol hash, suite digest, tasks, pins
    RUN_DIR/task_texts.jsonl         each task's prompt and tags as the suite gave them, one
                                     JSON line per task: what the viewer shows of the suite,
                                     kept in the run so that it goes wherever the run goes
    RUN_DIR/trials.jsonl             one fsync'd line per job id: the ledger (a job that
                                     `run --retry-errors` ran again has its error record
                                     and, after it, the new one: see below)
    RUN_DIR/trials.duplicates.jsonl  later records of an already recorded job (audit only)
    RUN_DIR/report.{md,json}         written by `report`, rebuilt by `replay`
    RUN_DIR/scorecard.json           an arm's on vs off legs (seed 001's DeltaScorecard),
                                     beside the report; scorecard-<arm>.json for several
    RUN_DIR/sessions/<sha256>.tar.gz an installed agent's session (its log files, stdout and
                                     the gateway's request log), named by the record's
                                     ``session_sha256``; the ledger never holds the bytes
    RUN_DIR/reverify.json            the verdicts `replay --reverify` last changed
                                     (runner.run.reverify)
    RUN_DIR/view/                    the viewer's pages, when `deltarun view RUN --bundle
                                     RUN/view` wrote them; a new run's report.html links here

Nothing in a run directory depends on where it was written: what is read back from it is
in it. run.json's ``controls_path`` (the controls' absolute path on the machine that ran
it) is only a hint where ``replay --reverify`` and ``export`` may find the suite's
archives; nothing shown or reported is read through it. A run directory written before
``task_texts.jsonl`` existed has none (``RunDir.task_texts`` is then None).

The ledger is append-only. A job's record is its first line, unless that record is an
infrastructure ``error`` and a later line of the same job follows it: ``run --retry-errors``
ran the job again, and the later record is the job's record (``RunDir.records``); the error
records it superseded stay in the file, for audit, and the report counts them as retried.
A later line after a record that is not an error changes nothing (the first record stands).

A run directory belongs to one protocol hash; opening it under another raises
``ProtocolMismatch``. A torn last line (a crash mid-write) is set aside in
``trials.torn`` on resume, never silently dropped.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import ValidationError

from runner.atomic import write_atomic
from runner.bounded_input import open_regular, read_capped, sha256_capped
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.config.controls import Controls
from runner.config.loader import CONTROLS_MAX_BYTES, parse_controls
from runner.errors import ProtocolMismatch, UserError
from runner.hashing import sha256_bytes
from runner.paths import inside
from runner.records import Outcome, ScoredTrial, Trial

RUN_FILE = "run.json"
LEDGER = "trials.jsonl"
DUPLICATES = "trials.duplicates.jsonl"
SESSIONS = "sessions"
TASK_TEXTS = "task_texts.jsonl"
TASK_TEXTS_BYTES = 64 << 20  # of task_texts.jsonl read back (a run directory is input)
RUN_FILE_BOUNDS = JsonBounds(max_bytes=64 << 20, max_items=10_000_000)  # run.json read back
LEDGER_BYTES = 1 << 40  # a ledger read or hashed: a regular file (not a FIFO), within this
RECORD_BYTES = 256 << 20  # one ledger line read back
KEPT_BYTES = 256 << 20  # a report, looks.json or decision.json read back
TASK_TEXTS_LINES = 200_000
VIEW_BUNDLE = "view"  # RunMeta.view_bundle of a new run
Kept = TypeVar("Kept")


def _same(trial: Trial) -> Trial:
    return trial


def ledger_rule(lines: Iterable[tuple[str, bool, Kept]]) -> tuple[list[Kept], list[Kept]]:
    """The ledger's rule (above) over its lines in order, each given as (job id, whether it
    is an infrastructure error, what is kept of it): each job's record, in the order jobs
    first appear, and the error records later lines superseded, in order. A line without a
    job id stands on its own (the viewer's lines that are not records)."""
    current: list[tuple[bool, Kept]] = []
    at: dict[str, int] = {}
    retried: list[Kept] = []
    for job, error, kept in lines:
        index = at.get(job) if job else None
        if index is None:
            if job:
                at[job] = len(current)
            current.append((error, kept))
        elif current[index][0]:  # an error record: the later line is the job's record
            retried.append(current[index][1])
            current[index] = (error, kept)
    return [kept for _, kept in current], retried


@dataclass(frozen=True)
class RunMeta:
    run_id: str
    protocol_id: str
    protocol_sha256: str
    suite_sha256: str
    channel: str
    control_arm: str
    arms: list[str]
    tasks: list[dict[str, str]]
    image_digests: dict[str, str]
    agent_dir_digests: dict[str, str]
    created_at: str
    deltarun_version: str
    python_version: str
    # where the controls (and so the suite) were on the machine that ran it: a hint for
    # --reverify and export, never read for what is shown (task_texts.jsonl is)
    controls_path: str = ""
    builtin_metrics_sha256: str = ""  # runner/grading/metrics.py of the deltarun that ran it
    scoring_sha256: str = ""  # runner/{evidence,grading,report} (runner.run.scoring_code)
    # installed arm → {"agent": "<name>@<version>", "artifacts_sha256": digest of its files}
    agent_artifacts: dict[str, dict[str, str]] = field(default_factory=dict)
    # arm with toggles → the mode it ran in: skill-on, skill-off or both (--baseline-mode, or
    # its baseline: in the controls); None in a run.json written before the field existed
    baseline_modes: dict[str, str] | None = None
    # the folder in the run directory report.html links into (its index.html), where
    # `deltarun view RUN --bundle RUN/view` writes the viewer; "" in a run.json written
    # before the field existed, whose report.html has no link and so replays unchanged
    view_bundle: str = VIEW_BUNDLE
    # the report shows the pass rate with errors excluded and with errors as failures, side
    # by side (runner.report.accountings); False in a run.json written before the field
    # existed, whose report then replays unchanged (unless the run was retried since)
    error_accountings: bool = True

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TaskText:
    """What a run keeps of a task's line for people to read: its prompt and tags."""

    id: str
    prompt: str
    tags: tuple[str, ...] = ()

    def to_line(self) -> str:
        data = {"id": self.id, "prompt": self.prompt, "tags": list(self.tags)}
        return json.dumps(data, sort_keys=True) + "\n"  # ASCII: no U+2028 splits a line


def texts_of(lines: Sequence[str]) -> dict[str, TaskText]:
    """Task texts by id from JSON lines with ``id``, ``prompt`` and ``tags`` (task_texts.jsonl,
    or a suite's tasks.jsonl, whose other fields are passed over). Read as input: a line
    that is not such an object is passed over; the first line of a task id counts."""
    texts: dict[str, TaskText] = {}
    for line in lines[:TASK_TEXTS_LINES]:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            continue
        prompt, tags = data.get("prompt"), data.get("tags")
        texts.setdefault(
            data["id"],
            TaskText(
                data["id"],
                prompt if isinstance(prompt, str) else "",
                tuple(str(tag) for tag in tags) if isinstance(tags, list) else (),
            ),
        )
    return texts


def _lines(raw: BinaryIO, path: Path) -> Iterator[str]:
    """The ledger's lines as text, each read within ``RECORD_BYTES`` (a run directory is
    input: one endless line is refused, not held in memory)."""
    number = 0
    while line := raw.readline(RECORD_BYTES + 1):
        number += 1
        if len(line) > RECORD_BYTES:
            raise UserError(f"{path}:{number}: a record over {RECORD_BYTES} bytes; not a ledger")
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}:{number}: not UTF-8 ({exc.reason})") from None


def new_run_id(protocol_id: str, now: datetime) -> str:
    return f"{protocol_id}-{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


class RunDir:
    """A run directory on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._recorded: set[str] | None = None
        self.line_of: dict[str, int] = {}  # job id → ledger line, for error messages

    def _input(self, name: str) -> Path:
        """A file of the run directory read as input (a baseline, a kit's run, a replay):
        held inside it, no link out (``paths.inside``)."""
        return inside(self.path, name, file=self.path, field=name)

    def kept(self, name: str) -> bytes:
        """A file the run wrote (a report, looks.json, decision.json) read back as input:
        held inside the run directory, a regular file of at most ``KEPT_BYTES``."""
        return read_capped(self._input(name), KEPT_BYTES, f"a run's {name}")

    def stored_controls(self) -> Controls:
        """The controls the run was started with (``controls.yaml`` kept in the run)."""
        path = self.path / "controls.yaml"
        try:
            data = read_capped(self._input("controls.yaml"), CONTROLS_MAX_BYTES, "controls")
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: cannot read the controls the run kept ({exc})") from exc
        return parse_controls(text, str(path))

    @property
    def ledger_path(self) -> Path:
        return self.path / LEDGER

    def exists(self) -> bool:
        return (self.path / RUN_FILE).is_file()

    def meta(self) -> RunMeta:
        try:
            raw = read_capped(self._input(RUN_FILE), RUN_FILE_BOUNDS.max_bytes, RUN_FILE)
            data = loads_bounded(raw, RUN_FILE_BOUNDS)
            # absent: written before the field
            return RunMeta(**{"view_bundle": "", "error_accountings": False, **data})
        except FileNotFoundError as exc:
            raise UserError(f"{self.path}: not a run directory (no {RUN_FILE})") from exc
        except (BoundsError, TypeError, OSError) as exc:
            raise UserError(f"{self.path / RUN_FILE}: unreadable run metadata ({exc})") from exc

    def create(self, meta: RunMeta, controls_bytes: bytes, texts: Sequence[TaskText] = ()) -> None:
        """Write a new run directory: its controls, its tasks' texts (when given), then
        run.json, which makes it one, and an empty ledger."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / "controls.yaml", controls_bytes)
        if texts:
            self.keep_task_texts(texts)
        write_atomic(
            self.path / RUN_FILE,
            (json.dumps(meta.to_json(), indent=2, sort_keys=True) + "\n").encode(),
        )
        self.ledger_path.touch()

    def keep_task_texts(self, texts: Sequence[TaskText]) -> None:
        """Write task_texts.jsonl (atomically): the tasks' prompts and tags, in order."""
        write_atomic(self.path / TASK_TEXTS, "".join(t.to_line() for t in texts).encode())

    def task_texts(self) -> dict[str, TaskText] | None:
        """The tasks' prompts and tags by task id, or None when the run directory keeps
        none (recorded before the file existed). Read as input: at most
        ``TASK_TEXTS_BYTES`` (``texts_of`` says the rest)."""
        try:
            with (self.path / TASK_TEXTS).open("rb") as handle:
                data = handle.read(TASK_TEXTS_BYTES)
        except FileNotFoundError:
            return None
        except OSError:
            return {}
        return texts_of(data.decode("utf-8", "replace").split("\n"))

    def check_protocol(self, protocol_sha256: str) -> RunMeta:
        meta = self.meta()
        if meta.protocol_sha256 != protocol_sha256:
            raise ProtocolMismatch(
                f"{self.path}: this run directory belongs to protocol {meta.protocol_sha256}, "
                f"the controls hash to {protocol_sha256}; use a new --out directory"
            )
        return meta

    def repair_torn_tail(self) -> None:
        """Move an unterminated last line (a crash mid-write) aside before appending."""
        path = self.ledger_path
        if not path.is_file():
            return
        data = path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with (self.path / "trials.torn").open("ab") as handle:
            handle.write(data[cut:] + b"\n")
        with path.open("r+b") as handle:
            handle.truncate(cut)
            os.fsync(handle.fileno())

    def iter_lines(self) -> Iterator[tuple[int, str]]:
        """Numbered ledger lines. A missing ledger or a truncated last line is an error
        naming the file and line (``run --resume`` sets a truncated line aside first)."""
        path = self.ledger_path
        if not path.is_file():
            raise UserError(
                f"{path}: missing; this run directory has no ledger (restore it from a copy)"
            )
        with open_regular(self._input(LEDGER), LEDGER_BYTES, "a ledger") as raw:
            for number, line in enumerate(_lines(raw, path), start=1):
                if not line.endswith("\n"):
                    raise UserError(
                        f"{path}:{number}: truncated record (a crash mid-write?); "
                        "`deltarun run --resume` sets it aside and runs that job again"
                    )
                if line.strip():
                    yield number, line

    def _parsed(self) -> Iterator[tuple[int, Trial]]:
        """Every ledger line as a record, numbered; an invalid one is an error naming it."""
        for number, line in self.iter_lines():
            try:
                yield number, Trial.model_validate_json(line)
            except ValidationError as exc:
                raise UserError(
                    f"{self.ledger_path}:{number}: not a valid trial record "
                    f"({exc.errors()[0]['msg']})"
                ) from exc

    def records(self, keep: Callable[[Trial], Kept]) -> tuple[list[Kept], list[Kept]]:
        """Each job's record (``keep`` of it), in the order jobs first appear in the ledger,
        and the error records a later record of the same job superseded (``run
        --retry-errors``), in ledger order (``ledger_rule``). ``keep`` makes what is held per
        record small."""
        lines = (
            (trial.job_id, trial.outcome is Outcome.ERROR, (number, trial.job_id, keep(trial)))
            for number, trial in self._parsed()
        )
        current, retried = ledger_rule(lines)
        for number, job, _ in current:
            self.line_of[job] = number
        return [kept for _, _, kept in current], [kept for _, _, kept in retried]

    def trials(self) -> list[Trial]:
        """The record of every job id (``records``), in ledger order."""
        return self.records(_same)[0]

    def scored_trials(self) -> list[ScoredTrial]:
        """Like ``trials()``, keeping only what scoring reads: a report over 100,000
        records fits in a few hundred MB."""
        return self.records(ScoredTrial.of)[0]

    def scored_ledger(self) -> tuple[list[ScoredTrial], list[ScoredTrial]]:
        """``scored_trials()`` and the error records retries superseded, in one read."""
        return self.records(ScoredTrial.of)

    def recorded_ids(self) -> set[str]:
        with self._lock:
            if self._recorded is None:
                self._recorded = {t.job_id for t in self.trials()}
            return set(self._recorded)

    def keep_session(self, trial: Trial) -> Trial:
        """The record as the ledger holds it: a session carried in transit is written to
        ``sessions/<sha256>.tar.gz`` (fsync'd, before its record) and replaced by its digest."""
        if trial.session is None:
            return trial
        try:
            data = base64.b64decode(trial.session, validate=True)
        except ValueError:
            return trial.model_copy(update={"session": None})  # not ours: nothing to keep
        digest = sha256_bytes(data)
        path = self.path / SESSIONS / f"{digest}.tar.gz"
        if not path.is_file():
            path.parent.mkdir(exist_ok=True)
            write_atomic(path, data)
        return trial.model_copy(update={"session": None, "session_sha256": digest})

    def append(self, trial: Trial) -> bool:
        """Append one record, fsync'd. Returns False (and keeps it aside) for a duplicate."""
        line = self.keep_session(trial).model_dump_json() + "\n"
        with self._lock:
            if self._recorded is None:
                self._recorded = {t.job_id for t in self.trials()}
            target = self.ledger_path
            fresh = trial.job_id not in self._recorded
            if not fresh:
                target = self.path / DUPLICATES
            with target.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            self._recorded.add(trial.job_id)
            return fresh

    def write_records(self, fresh: list[Trial], duplicates: list[Trial]) -> None:
        """Append a batch whose freshness the caller decided, with one fsync per file.

        Used by the Celery coordinator, which knows which jobs are still pending and
        so needs no in-memory set of every recorded id (memory stays flat).
        """
        with self._lock:
            for target, batch in ((self.ledger_path, fresh), (self.path / DUPLICATES, duplicates)):
                if not batch:
                    continue
                with target.open("a", encoding="utf-8") as handle:
                    kept = [self.keep_session(t) for t in batch]
                    handle.write("".join(t.model_dump_json() + "\n" for t in kept))
                    handle.flush()
                    os.fsync(handle.fileno())
            self._recorded = None  # re-read on demand: no set of every id kept in memory

    def ledger_sha256(self) -> str:
        try:
            return sha256_capped(self._input(LEDGER), LEDGER_BYTES, "a ledger")
        except FileNotFoundError as exc:
            raise UserError(
                f"{self.ledger_path}: missing; this run directory has no ledger "
                "(restore it from a copy)"
            ) from exc

    def write_file(self, name: str, text: str) -> Path:
        path = self.path / name
        write_atomic(path, text.encode("utf-8"))
        return path


def now_utc() -> datetime:
    return datetime.now(UTC)
