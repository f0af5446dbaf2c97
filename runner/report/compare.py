"""``deltarun compare``: an arm of one run against an arm of another, paired per task. Pure.

RUN_A is the reference side and plays the control, RUN_B the candidate; the
arms may have the same name (the same arm across two runs). The numbers are the
report's own: ``paired_delta`` (pass rate, ordinary tasks), ``paired_delta`` on the negative tasks
(abstention accuracy, negative tasks) and ``summarise`` (cost), under names
that say which run each side comes from, printed in the headline's format.

Two runs share a table only when they ran the same sealed suite (the suite
digest in ``run.json``; exit 3 otherwise) in the same channel (a scored and an
exploratory run never mix; exit 1). A task with records in one run only is
inconclusive, counted and named, never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from runner.errors import DigestMismatch, UserError
from runner.evidence.scoring import Scores, paired_delta, summarise
from runner.records import Record, TaskKind
from runner.report.contents import EXPLORATORY_STAMP
from runner.report.markdown import headline_lines

SHOWN_IDS = 5  # task ids named in the pairing note before "and N more"


@dataclass(frozen=True)
class RunSide:
    """What the comparison reads of one run's ``run.json``, and where the run is."""

    path: str
    run_id: str
    suite_sha256: str
    channel: str
    arms: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """One arm of RUN_B (the candidate) against one arm of RUN_A (the control)."""

    scores: Scores  # summaries [control, candidate], one delta, one refusal delta
    paired: int  # task ids with records of the arm in both runs
    only_a: tuple[str, ...]  # task ids with records in RUN_A only
    only_b: tuple[str, ...]
    label_a: str
    label_b: str


def arm_pairs(a: RunSide, b: RunSide, arm: str | None, arm_b: str | None) -> list[tuple[str, str]]:
    """The (arm of RUN_A, arm of RUN_B) pairs to compare: ``arm`` against ``arm_b`` (or
    itself), or every arm both runs have, each against itself. Refuses runs of different
    suites (exit 3), of different channels, and an arm a run does not have (exit 1)."""
    if a.suite_sha256 != b.suite_sha256:
        raise DigestMismatch(
            f"{a.path} and {b.path}: suite digests differ ({a.suite_sha256} vs "
            f"{b.suite_sha256}); only runs of the same sealed suite can be paired per task"
        )
    if a.channel != b.channel:
        raise UserError(
            f"{a.path} is {a.channel} and {b.path} is {b.channel} (run.json channel): a scored "
            "and an exploratory run cannot share one table; compare runs of one channel"
        )
    if arm is not None:
        pair = (arm, arm if arm_b is None else arm_b)
        _require(a, pair[0], "--arm")
        _require(b, pair[1], "--arm" if arm_b is None else "--arm-b")
        return [pair]
    common = [name for name in a.arms if name in b.arms]
    if not common:
        raise UserError(
            f"{a.path} and {b.path}: no arm in both runs ({a.path} has {', '.join(a.arms)}; "
            f"{b.path} has {', '.join(b.arms)}); name them with --arm and --arm-b"
        )
    return [(name, name) for name in common]


def _require(side: RunSide, arm: str, option: str) -> None:
    if arm not in side.arms:
        raise UserError(
            f"{side.path}: no arm {arm!r} ({option}) in this run; its arms: {', '.join(side.arms)}"
        )


def labels(path_a: str, path_b: str) -> tuple[str, str]:
    """Short names of the two runs for the printed lines: the directory names, or the
    paths as given when the names are the same, marked A and B when those are too."""
    names = PurePath(path_a).name or path_a, PurePath(path_b).name or path_b
    if names[0] != names[1]:
        return names
    if path_a != path_b:
        return path_a, path_b
    return f"{path_a}, A", f"{path_b}, B"


def compare_arms(
    arm_a: str,
    arm_b: str,
    records_a: Sequence[Record],
    records_b: Sequence[Record],
    task_ids: Sequence[str],
    label_a: str,
    label_b: str,
) -> Comparison:
    """``arm_b`` of RUN_B minus ``arm_a`` of RUN_A, paired per task (repeats averaged first).

    ``records_a`` and ``records_b`` are all of a run's records; ``task_ids`` the runs'
    tasks in order. A task id only the records name is paired too (inconclusive if in one
    run only): nothing a ledger holds is left out."""
    control, candidate = f"{arm_a} ({label_a})", f"{arm_b} ({label_b})"
    mine_a = [t for t in records_a if t.arm == arm_a]
    mine_b = [t for t in records_b if t.arm == arm_b]
    ids = list(dict.fromkeys([*task_ids, *(t.task_id for t in mine_a + mine_b)]))
    in_a, in_b = {t.task_id for t in mine_a}, {t.task_id for t in mine_b}
    scores = Scores(
        summaries=[summarise(control, True, mine_a), summarise(candidate, False, mine_b)],
        deltas=[paired_delta(candidate, control, mine_b, mine_a, ids)],
        refusal=[paired_delta(candidate, control, mine_b, mine_a, ids, TaskKind.NEGATIVE)],
    )
    return Comparison(
        scores=scores,
        paired=len(in_a & in_b),
        only_a=tuple(i for i in ids if i in in_a and i not in in_b),
        only_b=tuple(i for i in ids if i in in_b and i not in in_a),
        label_a=label_a,
        label_b=label_b,
    )


def render(a: RunSide, b: RunSide, comparisons: Sequence[Comparison]) -> list[str]:
    """The printed lines: which runs, then per pair of arms the headline's three lines
    (pass-rate delta, refusal slice, cost) and a note of how the tasks paired."""
    label_a, label_b = labels(a.path, b.path)
    channel = EXPLORATORY_STAMP if a.channel != "scored" else "channel scored"
    lines = [
        f"compare {label_b} (run {b.run_id}) against {label_a} (run {a.run_id}) as control: "
        f"suite {a.suite_sha256[:12]}, {channel}"
    ]
    for c in comparisons:
        lines += headline_lines(c.scores)
        lines.append(pairing_note(c))
    return lines


def pairing_note(c: Comparison) -> str:
    """How many task ids paired, and which were in one run only (inconclusive)."""
    return (
        f"  tasks: {c.paired} paired across the runs; only in {c.label_a}: "
        f"{_ids(c.only_a)}; only in {c.label_b}: {_ids(c.only_b)}"
        + (" (counted inconclusive, not dropped)" if c.only_a or c.only_b else "")
    )


def _ids(ids: Sequence[str]) -> str:
    if not ids:
        return "0"
    shown = ", ".join(ids[:SHOWN_IDS])
    more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return f"{len(ids)} ({shown}{more})"
