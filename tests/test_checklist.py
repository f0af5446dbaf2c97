"""The publishability checklist, row by row."""

from __future__ import annotations

from runner.checklist import evaluate, verdict, withhold_headline
from runner.controls import parse_controls
from runner.models import Outcome, TaskKind
from runner.scoring import score
from tests.test_scoring import trial

SCORED = """\
protocol_id: p
channel: scored
suite: {file: t, sha256: %s}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: scripted, action: abstain}}
"""


def _trials(retries: int = 0) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(3):
        out.append(trial(f"t{i}", "ctrl", Outcome.MISS))
        out.append(
            trial(f"t{i}", "cand", Outcome.SUCCESS if i else Outcome.MISS, retries_used=retries)
        )
    out.append(trial("neg", "ctrl", Outcome.INVALID_COMPLETION, kind=TaskKind.NEGATIVE))
    out.append(trial("neg", "cand", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE))
    return out


def test_all_rows_hold_publishable() -> None:
    controls = parse_controls(SCORED % ("a" * 64), "c")
    trials = _trials()
    scores = score(trials, ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"])
    rows = evaluate(controls, "a" * 64, scores, trials, negative_tasks=1, edited=False)
    assert [r.item for r in rows if not r.ok] == []
    assert verdict(rows) == "publishable" and not withhold_headline(rows)


def test_failing_rows_make_a_demo_and_two_withhold_the_headline() -> None:
    controls = parse_controls(
        SCORED.replace("channel: scored", "channel: exploratory") % ("b" * 64), "c"
    )
    trials = _trials(retries=1)
    scores = score(trials, ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"])
    rows = evaluate(controls, "a" * 64, scores, trials, negative_tasks=0, edited=True)
    failing = {r.item for r in rows if not r.ok}
    assert failing == {
        "suite digest matches",
        "retries zero in the headline run",
        "refusal slice present",
        "channel scored",
        "replay reproduces the report",
    }
    assert verdict(rows) == "demo" and withhold_headline(rows)
    one = evaluate(
        parse_controls(SCORED.replace("channel: scored", "channel: exploratory") % ("a" * 64), "c"),
        "a" * 64,
        score(_trials(), ["ctrl", "cand"], "ctrl", ["t0", "t1", "t2", "neg"]),
        _trials(),
        negative_tasks=1,
        edited=False,
    )
    assert [r.item for r in one if not r.ok] == ["channel scored"] and not withhold_headline(one)
