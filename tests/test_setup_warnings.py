"""Setup warnings: each kind of broken task or arm is named, with its tasks, from records;
an ordinary run has none; the checklist's row fails while any remain."""

from __future__ import annotations

from runner.config.loader import parse_controls
from runner.records import Outcome, ScoredTrial, TaskKind, Trial
from runner.report.checklist import withhold_headline
from runner.setup_signals import NO_OUTPUT_LOG
from runner.store.setup_warnings import first_sign, setup_warnings
from tests.test_checklist import SCORED, _rows, _trials
from tests.test_scoring import trial

CONTROLS = """\
protocol_id: p
suite: {file: t, sha256: ""}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: rec, agent: {type: patch, dir: rec}}
  - {name: cmd, agent: {type: command, dir: cmd, argv: [run]}}
"""


def warnings_of(records: list[Trial]) -> list[str]:
    controls = parse_controls(CONTROLS, "c")
    found = setup_warnings(controls, records)
    # The report reads ScoredTrial records: the same warnings from them.
    assert setup_warnings(controls, [ScoredTrial.of(r) for r in records]) == found
    return found


def test_an_ordinary_run_has_no_setup_warning() -> None:
    records = [
        trial("t1", "ctrl", Outcome.MISS, verify_exit_code=1, agent_exit_code=0),
        trial("t1", "rec", Outcome.SUCCESS, verify_exit_code=0, agent_exit_code=0),
        trial("t1", "cmd", Outcome.MISS, verify_exit_code=1, agent_exit_code=1),
        trial("n1", "ctrl", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE),
    ]
    assert warnings_of(records) == []


def broken_records() -> list[Trial]:
    """One record of each broken kind (and a sound one) over the arms of ``CONTROLS``."""
    return [
        trial("t1", "ctrl", Outcome.SUCCESS, verify_exit_code=0),
        trial("t2", "ctrl", Outcome.MISS, reason="no test ran"),
        trial("t1", "rec", Outcome.MISS, agent_exit_code=1, agent_log="error: patch failed"),
        trial("t2", "rec", Outcome.MISS, agent_exit_code=None, agent_log=NO_OUTPUT_LOG),
        trial("t1", "cmd", Outcome.MISS, agent_exit_code=127),
        trial("t2", "cmd", Outcome.MISS, agent_exit_code=126),
        trial("t3", "cmd", Outcome.SUCCESS, agent_exit_code=0),
    ]


def test_each_broken_kind_is_named_with_its_tasks() -> None:
    records = broken_records()
    found = warnings_of(records)
    assert len(found) == 5, found
    control, refused, empty, lost, tests = found
    assert control.startswith("the control ctrl passes 1 task(s): t1")
    assert refused.startswith("arm rec: the recorded patch does not apply on 1 task(s): t1")
    assert empty.startswith("arm rec: no recorded output for 1 task(s): t2")
    assert lost.startswith("arm cmd: the agent exited 126/127") and "2 of 3 trials" in lost
    assert tests.startswith("the hidden test ran no test on 1 task(s): t2")


def test_a_control_that_is_an_agent_may_pass_tasks() -> None:
    """Passes of a control that changes nothing mean a broken task; passes of a control
    that is recorded patches (an older model) are its result, not a setup mistake."""
    controls = parse_controls(
        CONTROLS.replace("control: true, ", "").replace(
            "{name: rec, ", "{name: rec, control: true, "
        ),
        "c",
    )
    records = [
        trial("t1", "rec", Outcome.SUCCESS, verify_exit_code=0, agent_exit_code=0),
        trial("t1", "ctrl", Outcome.MISS, verify_exit_code=1),
    ]
    assert setup_warnings(controls, records) == []
    assert first_sign(controls, records[0]) is None
    noop_control = parse_controls(CONTROLS, "c")
    passing = trial("t1", "ctrl", Outcome.SUCCESS, verify_exit_code=0)
    assert setup_warnings(noop_control, [passing])[0].startswith("the control ctrl passes")


def test_a_command_arm_that_fails_to_start_on_few_tasks_is_not_flagged() -> None:
    records = [
        trial(f"t{i}", "cmd", Outcome.MISS, agent_exit_code=127 if i == 0 else 1) for i in range(3)
    ]
    assert warnings_of(records) == []


def test_the_setup_row_fails_while_warnings_remain_and_never_withholds_alone() -> None:
    controls = parse_controls(SCORED % ("a" * 64), "c")
    rows = {r.item: r for r in _rows(_trials(), controls=controls, setup=["a warning"])}
    assert not rows["no setup warnings"].ok
    assert "1 warning(s)" in rows["no setup warnings"].detail
    assert not withhold_headline(list(rows.values()))


def test_the_progress_flags_the_first_record_of_each_kind() -> None:

    controls = parse_controls(CONTROLS, "c")
    assert first_sign(controls, trial("t1", "ctrl", Outcome.MISS, agent_exit_code=0)) is None
    signs = [
        first_sign(controls, r)
        for r in (
            trial("t1", "ctrl", Outcome.SUCCESS, verify_exit_code=0),
            trial("t1", "rec", Outcome.MISS, agent_exit_code=1),
            trial("t2", "rec", Outcome.MISS, agent_log=NO_OUTPUT_LOG),
            trial("t1", "cmd", Outcome.MISS, agent_exit_code=127),
            trial("t3", "cmd", Outcome.MISS, agent_exit_code=0, reason="no test ran"),
        )
    ]
    assert [s[0] for s in signs if s] == [
        "control-passes", "refused:rec", "empty:rec", "lost:cmd", "no-test",
    ]  # fmt: skip
    assert signs[3] is not None and "exited 127 (cmd on t1)" in signs[3][1]
