"""`run --until-decided`, the pure parts: the controls' sequential block and its hash, the
seeded block order of the plan, and the looks over scripted paired outcomes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from runner.config.controls import Controls
from runner.config.gate_spec import GateSpec, SequentialSpec
from runner.config.loader import protocol_hash
from runner.evidence.repeated_interval import paired_repeated_interval
from runner.evidence.sequential import Decision, Design, boundaries
from runner.evidence.stopping import Target, blocks, look_at, task_order
from runner.hashing import sha256_json
from runner.records import AnswerTask, Task
from runner.suite.plan import plan_jobs, task_blocks

BASE: dict[str, Any] = {
    "protocol_id": "p",
    "channel": "exploratory",
    "suite": {"file": "suite/tasks.jsonl", "sha256": "0" * 64},
    "runtime": {"repeats": 2, "seed": 7},
    "arms": [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "cand", "agent": {"type": "scripted", "action": "noop"}},
        {"name": "other", "agent": {"type": "scripted", "action": "abstain"}},
    ],
}
SEQUENTIAL = {"spending": "obrien_fleming", "block": 4}


def controls(gate: dict[str, Any] | None = None, seed: int = 7) -> Controls:
    data = {**BASE, "runtime": {**BASE["runtime"], "seed": seed}}
    if gate is not None:
        data["gate"] = gate
    return Controls.model_validate(data)


def tasks(n: int) -> list[Task]:
    return [
        AnswerTask.model_validate(
            {
                "id": f"t{i:02d}",
                "kind": "ordinary",
                "prompt": "p",
                "expect": 1,
                "metrics": ["exact_match"],
                "deadline_s": 5,
            }
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- controls


def test_sequential_takes_exactly_one_of_block_and_looks() -> None:
    assert SequentialSpec(spending="pocock", looks=3).block_size(10) == 4
    assert SequentialSpec(spending="pocock", block=4).block_size(10) == 4
    for bad in ({"spending": "pocock"}, {"spending": "pocock", "block": 2, "looks": 2}):
        with pytest.raises(ValidationError, match="exactly one of block"):
            SequentialSpec.model_validate(bad)
    with pytest.raises(ValidationError):
        SequentialSpec.model_validate({"spending": "linear", "block": 2})
    assert SequentialSpec(spending="pocock", block=2).alpha == 0.025


def test_the_sequential_block_is_hashed_only_when_present() -> None:
    plain = controls({"non_inferiority": 0.05})
    data = plain.model_dump(mode="json", by_alias=True)
    for section, key in (
        ("runtime", "archive"), ("runtime", "python"), ("runtime", "retry_errors"),
        ("suite", "validation"),
    ):  # fmt: skip
        data[section].pop(key, None)
    data["suite"].pop("exclude", None)
    for key in ("prices", "budget", "rate_limits"):
        data.pop(key, None)
    del data["gate"]["sequential"]  # a gate written before the block existed
    for arm in data["arms"]:
        for key in ("on_files", "on_env"):
            (arm.get("toggles") or {}).pop(key, None)
    assert protocol_hash(plain, {}) == sha256_json({"controls": data, "agent_dirs": {}})
    with_block = controls({"non_inferiority": 0.05, "sequential": SEQUENTIAL})
    assert protocol_hash(with_block, {}) != protocol_hash(plain, {})


def test_delta_targets_read_the_margins() -> None:
    spec = GateSpec(superiority=0.0, non_inferiority=0.1, refusal_non_inferiority=0.2)
    assert spec.delta_targets() == [
        ("superiority", 0.0, False),
        ("non_inferiority", -0.1, False),
        ("refusal_non_inferiority", -0.2, True),
    ]


# --------------------------------------------------------------------------- order


def test_the_order_is_seeded_fixed_and_independent_of_the_suite_order() -> None:
    ids = [f"t{i:02d}" for i in range(14)]
    first = task_order(ids, random.Random(3))
    assert first == task_order(list(reversed(ids)), random.Random(3))
    assert first != task_order(ids, random.Random(4))
    assert sorted(first) == ids
    assert [len(b) for b in blocks(first, 4)] == [4, 4, 4, 2]
    with pytest.raises(ValueError):
        blocks(first, 0)


def test_a_sequential_plan_runs_every_arm_and_repeat_of_a_block_before_the_next() -> None:
    c = controls({"superiority": 0.0, "sequential": SEQUENTIAL})
    suite = tasks(10)
    jobs = plan_jobs(c, suite, "h", "run", random.Random(7))
    cut = task_blocks(c, [t.id for t in suite])
    assert cut is not None and [len(b) for b in cut] == [4, 4, 2]
    assert cut == task_blocks(c, [t.id for t in reversed(suite)])  # fixed by the protocol
    assert task_blocks(controls({"superiority": 0.0, "sequential": SEQUENTIAL}, seed=8), []) == []
    assert len(jobs) == 10 * 3 * 2 and len({j.job_id for j in jobs}) == len(jobs)
    position = {t: k for k, block in enumerate(cut) for t in block}
    seen = [position[j.task_id] for j in jobs]
    assert seen == sorted(seen)  # block by block
    for k, block in enumerate(cut):
        mine = [(j.task_id, j.arm, j.repeat) for j in jobs if position[j.task_id] == k]
        expected = {(t, a, r) for t in block for a in ("ctrl", "cand", "other") for r in (0, 1)}
        assert set(mine) == expected and len(mine) == len(expected)


def test_without_the_block_the_plan_is_unchanged() -> None:
    c = controls({"superiority": 0.0})
    suite = tasks(5)
    assert task_blocks(c, [t.id for t in suite]) is None
    jobs = plan_jobs(c, suite, "h", "run", random.Random(7))
    rng = random.Random(7)
    expected = []
    for repeat in (0, 1):
        order = [t.id for t in suite]
        rng.shuffle(order)
        expected += [(t, a, repeat) for t in order for a in ("ctrl", "cand", "other")]
    assert [(j.task_id, j.arm, j.repeat) for j in jobs] == expected


# --------------------------------------------------------------------------- looks

SUP = Target("cand", "superiority", 0.0)
NONINF = Target("cand", "non_inferiority", -0.1)
OBF = Design("obrien-fleming", 0.025, 1)
POCOCK = Design("pocock", 0.025, 1)


def looks(design: Design, per_block: list[float], total: int, target: Target) -> list[Any]:
    """Looks after each block of ``per_block`` until decided or the suite is spent."""
    taken, diffs, done = [], [], []
    while not done or done[-1] < total:
        diffs += per_block[: total - len(diffs)]
        done.append(len(diffs))
        taken.append(look_at(design, done, total, [target], {target: diffs}))
        if taken[-1].decided:
            break
    return taken


def test_a_clearly_better_arm_passes_before_the_suite_is_spent() -> None:
    taken = looks(OBF, [1, 1, 1, 0], 12, SUP)
    assert [t.targets[0].decision for t in taken] == [Decision.CONTINUE, Decision.PASS]
    last = taken[-1]
    assert (last.number, last.tasks_done, last.final) == (2, 8, False)
    assert last.bound == pytest.approx(boundaries(OBF, [4 / 12, 8 / 12])[-1])
    interval = last.targets[0].interval
    assert interval == paired_repeated_interval([1, 1, 1, 0] * 2, last.bound)
    assert interval is not None and interval.low > 0


def test_a_clearly_worse_arm_fails_non_inferiority_early() -> None:
    taken = looks(POCOCK, [-1, -1, -1, 0], 12, NONINF)
    assert [t.targets[0].decision for t in taken] == [Decision.CONTINUE, Decision.FAIL]
    interval = taken[-1].targets[0].interval
    assert interval is not None and interval.high < -0.1


def test_a_null_arm_runs_the_suite_and_ends_undecided() -> None:
    taken = looks(OBF, [1, -1, 0, 0], 12, SUP)
    assert [t.targets[0].decision for t in taken] == [
        Decision.CONTINUE,
        Decision.CONTINUE,
        Decision.UNDECIDED,
    ]
    assert taken[-1].final and taken[-1].fraction == 1.0


def test_agreeing_pairs_decide_on_their_counts_and_every_target_must_decide() -> None:
    # Differences that all agree have no spread: without a binary table (repeats that
    # disagree, scores like 0.5) they never decide; binary ones read exact bounds on the
    # counts, and a suite whose every task the candidate fixed stops.
    assert [t.targets[0].decision for t in looks(OBF, [1, 1, 1, 1], 8, SUP)] == [
        Decision.CONTINUE,
        Decision.UNDECIDED,
    ]
    helped = look_at(OBF, [4, 8, 12], 12, [SUP], {SUP: [1.0] * 12}, {SUP: [0, 12, 0, 0]})
    assert helped.decided and helped.targets[0].decision is Decision.PASS
    interval = helped.targets[0].interval
    assert interval is not None and interval.method == "exact-agreeing" and interval.low > 0
    early = look_at(OBF, [4], 12, [SUP], {SUP: [1.0] * 4}, {SUP: [0, 4, 0, 0]})
    assert early.targets[0].decision is Decision.CONTINUE  # four of four is not enough
    mixed = look_at(OBF, [4, 8], 12, [SUP], {SUP: [0.5] * 8}, {})
    assert mixed.targets[0].decision is Decision.CONTINUE
    diffs = [1.0, 1.0, 1.0, 0.0] * 2
    both = look_at(OBF, [4, 8], 12, [SUP, NONINF], {SUP: diffs, NONINF: diffs})
    assert both.decided
    one_missing = look_at(OBF, [4, 8], 12, [SUP, NONINF], {SUP: diffs})
    assert not one_missing.decided
    assert one_missing.targets[1].interval is None
    assert one_missing.targets[1].decision is Decision.CONTINUE
    with pytest.raises(ValueError):
        look_at(OBF, [13], 12, [SUP], {})


# --------------------------------------------------------------------------- the gate


def test_the_gate_decides_on_the_last_look_and_an_early_stop_is_complete() -> None:
    from runner.config.gate_spec import DEFAULT_REQUIRED_ROWS
    from runner.report.checklist import Row
    from runner.report.gate_decision import PRECONDITION, Stop, Verdict, decide
    from runner.report.gate_formats import decision_json, lines
    from tests.test_gate_decision import scores

    diffs = [1.0, 1.0, 1.0, 0.0] * 2
    last = look_at(OBF, [4, 8], 12, [SUP], {SUP: diffs})
    stop = Stop(last, 3, True, 12, 16, 24, "obrien_fleming", complete=True)
    rows = [
        Row(item, item != "run complete", "8 planned jobs missing")
        for item in DEFAULT_REQUIRED_ROWS
    ]
    spec = GateSpec(superiority=0.0)
    # the fixed interval says undecided; the look decides, on its repeated interval
    decision = decide(spec, scores(ci95=(-0.1, 0.9)), rows, False, None, stop)
    sup = next(c for c in decision.criteria if c.name == "superiority")
    interval = last.targets[0].interval
    assert interval is not None
    assert (sup.verdict, sup.low, sup.high, sup.n) == (Verdict.PASS, interval.low, interval.high, 8)
    assert sup.detail == "repeated interval at look 2 of 3"
    complete = next(c for c in decision.criteria if c.row == "run complete")
    assert complete.verdict is Verdict.PASS and "stopped early at look 2 of 3" in complete.detail
    assert decision.exit_code == 0
    shown = lines(decision)
    assert any(line.startswith("sequential: stopped at look 2 of 3 (early") for line in shown)
    assert any("repeated [" in line for line in shown)
    assert '"trials_saved": 8' in decision_json(decision, {})
    # a stop before a decision (budget, Ctrl-C) leaves run complete failing
    late = Stop(last, 3, False, 12, 16, 24, "obrien_fleming", complete=True)
    held = decide(spec, scores(), rows, False, None, late)
    failing = [c for c in held.criteria if c.name == PRECONDITION and c.verdict is Verdict.FAIL]
    assert [c.row for c in failing] == ["run complete"]
    assert "before a decision" in late.line()
    # without a stop, the fixed interval as before, and no sequential entry in decision.json
    plain = decide(spec, scores(ci95=(-0.1, 0.9)), rows, False, None)
    assert next(c for c in plain.criteria if c.name == "superiority").verdict is Verdict.UNDECIDED
    assert "sequential" not in decision_json(plain, {})
