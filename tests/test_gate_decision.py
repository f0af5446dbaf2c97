"""The gate's pure decision: every criterion's pass / fail / undecided / missing over hand-built
scores, the preconditions, the overall decision and its exit code; the criteria's models."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from scipy import stats as sps

from runner.config.controls import Controls
from runner.config.gate_spec import DEFAULT_REQUIRED_ROWS, GateSpec
from runner.config.loader import protocol_hash
from runner.evidence.scoring import T_INTERVAL, ArmSummary, CaseDelta, PairedDelta, Rate, score
from runner.records import Outcome
from runner.report.checklist import Row
from runner.report.cost import ArmCost, CostTable
from runner.report.gate_decision import (
    EXIT_CODES,
    PRECONDITION,
    Criterion,
    GateDecision,
    Verdict,
    decide,
)
from tests.test_scoring import trial

CONTROL = "ctrl"


def summary(arm: str, control: bool = False, errors: int = 0, trials: int = 10) -> ArmSummary:
    none = Rate(0, 0)
    return ArmSummary(
        arm=arm,
        control=control,
        trials=trials,
        n=trials - errors,
        passes=0,
        pass_rate=none,
        timeout_rate=none,
        tool_violation_rate=none,
        error_rate=Rate(errors, trials),
        tokens_per_pass=None,
        wall_s_per_task=1.0,
        retries_mean=0.0,
        tool_calls_mean=0.0,
        abstention_accuracy=none,
        invalid_completion_rate=none,
        false_abstention_rate=none,
        outcomes={},
    )


def delta(
    arm: str, ci95: tuple[float, float] | None, n: int = 10, cases: list[CaseDelta] | None = None
) -> PairedDelta:
    mean = None if ci95 is None else (ci95[0] + ci95[1]) / 2
    return PairedDelta(
        arm=arm,
        control=CONTROL,
        n_tasks=n,
        mean=mean,
        sd=None,
        ci95=ci95,
        mcnemar_p=None,
        helped=0,
        hurt=0,
        same=n,
        inconclusive=0,
        cases=cases or [],
        ci_method="newcombe-paired" if ci95 else None,
    )


def scores(
    ci95: tuple[float, float] | None = (0.1, 0.5),
    refusal: tuple[float, float] | None = (0.1, 0.5),
    errors: int = 0,
    n: int = 10,
) -> Any:
    from runner.evidence.scoring import Scores

    return Scores(
        [summary(CONTROL, True), summary("cand", errors=errors)],
        [delta("cand", ci95, n)],
        [delta("cand", refusal, n)],
    )


HOLD = [Row(item, True, "fine") for item in DEFAULT_REQUIRED_ROWS]


def only(spec: dict[str, Any], **kw: Any) -> list[Criterion]:
    """The criteria (preconditions aside) that ``spec`` gives on ``scores(**kw)``."""
    cost = kw.pop("cost", None)
    decision = decide(GateSpec(**spec), scores(**kw), HOLD, False, cost)
    return [c for c in decision.criteria if c.name != PRECONDITION]


@pytest.mark.parametrize(
    ("name", "margin", "ci95", "verdict", "threshold"),
    [
        ("superiority", 0.0, (0.05, 0.4), Verdict.PASS, 0.0),
        ("superiority", 0.0, (-0.4, -0.05), Verdict.FAIL, 0.0),
        ("superiority", 0.0, (-0.1, 0.3), Verdict.UNDECIDED, 0.0),
        ("superiority", 0.0, (0.0, 0.3), Verdict.UNDECIDED, 0.0),  # on the line: not above
        ("superiority", 0.1, (0.05, 0.4), Verdict.UNDECIDED, 0.1),
        ("superiority", 0.1, (0.15, 0.4), Verdict.PASS, 0.1),
        ("superiority", 0.1, (-0.2, 0.09), Verdict.FAIL, 0.1),
        ("non_inferiority", 0.05, (-0.04, 0.2), Verdict.PASS, -0.05),
        ("non_inferiority", 0.05, (-0.06, 0.2), Verdict.UNDECIDED, -0.05),
        ("non_inferiority", 0.05, (-0.5, -0.06), Verdict.FAIL, -0.05),
        ("non_inferiority", 0.05, (-0.5, -0.05), Verdict.UNDECIDED, -0.05),
    ],
)
def test_a_delta_criterion_reads_the_interval_against_its_threshold(
    name: str, margin: float, ci95: tuple[float, float], verdict: Verdict, threshold: float
) -> None:
    (found,) = only({name: margin}, ci95=ci95)
    assert (found.name, found.arm, found.verdict) == (name, "cand", verdict)
    assert found.threshold == threshold
    assert (found.low, found.high, found.n) == (ci95[0], ci95[1], 10)
    # the refusal criterion reads the refusal slice's interval, not the headline's
    (refusal,) = only({f"refusal_{name}": margin}, ci95=(-1.0, 1.0), refusal=ci95)
    assert (refusal.name, refusal.verdict) == (f"refusal_{name}", verdict)


def test_no_pair_or_no_interval_is_missing() -> None:
    (found,) = only({"non_inferiority": 0.1}, ci95=None)
    assert found.verdict is Verdict.MISSING and "no paired interval" in found.detail
    (found,) = only({"refusal_non_inferiority": 0.1}, refusal=None)
    assert found.verdict is Verdict.MISSING
    gated_elsewhere = decide(GateSpec(arms=["other"], superiority=0), scores(), HOLD, False, None)
    assert [c.verdict for c in gated_elsewhere.criteria if c.arm == "other"] == [Verdict.MISSING]


def test_the_gate_reads_the_scorers_t_interval_which_scipy_reproduces() -> None:
    """Repeats that disagree give the t interval over per-task mean differences: the gate's
    bounds are the scorer's, and they are scipy's t interval."""
    outcomes = {
        "cand": [[1, 1], [1, 0], [1, 1], [0, 1], [1, 1], [1, 0]],
        CONTROL: [[0, 0], [1, 0], [0, 0], [0, 1], [0, 0], [0, 1]],
    }
    records = [
        trial(f"t{task}", arm, Outcome.SUCCESS if ok else Outcome.MISS, repeat=r)
        for arm, rows in outcomes.items()
        for task, row in enumerate(rows)
        for r, ok in enumerate(row)
    ]
    found = score(records, [CONTROL, "cand"], CONTROL, [f"t{i}" for i in range(6)])
    (paired,) = found.deltas
    assert paired.ci_method == T_INTERVAL
    diffs = [
        sum(a) / 2 - sum(b) / 2 for a, b in zip(outcomes["cand"], outcomes[CONTROL], strict=True)
    ]
    mean = sum(diffs) / len(diffs)
    low, high = sps.t.interval(0.95, len(diffs) - 1, loc=mean, scale=sps.sem(diffs))
    assert paired.ci95 == pytest.approx((low, high))
    decision = decide(GateSpec(superiority=0.0, non_inferiority=0.1), found, HOLD, False, None)
    sup, noninf = (c for c in decision.criteria if c.name != PRECONDITION)
    assert (sup.low, sup.high) == pytest.approx((low, high))
    assert -0.1 < low < 0 < high  # diffs 1,0,1,0,1,0: mean 0.5, t(5) half-width 0.575
    assert sup.verdict is Verdict.UNDECIDED
    assert noninf.verdict is Verdict.PASS


def cost_row(arm: str, *, live: bool = True, priced: int = 10, usd: float = 2.0, passes: int = 4):
    """Ten trials on ten tasks, ``usd`` spread evenly, the first ``passes`` tasks passed."""
    tasks = tuple((f"t{i}", usd / 10, int(i < passes)) for i in range(10))
    return ArmCost(arm, live, 10, priced, usd, passes, tasks)


@pytest.mark.parametrize(
    ("row", "verdict", "estimate"),
    [
        (cost_row("cand", usd=4.0, passes=10), Verdict.PASS, 0.4),  # $0.40 each, every time
        (cost_row("cand", usd=6.0, passes=10), Verdict.FAIL, 0.6),
        (cost_row("cand", usd=2.0, passes=4), Verdict.UNDECIDED, 0.5),  # 0.5 but 4 passes
        (cost_row("cand", usd=1.6, passes=8), Verdict.PASS, 0.2),  # [0.15, 0.32]
        (cost_row("cand", usd=2.0, passes=0), Verdict.FAIL, math.inf),
        (cost_row("cand", usd=0.0, passes=0, priced=10), Verdict.MISSING, None),
        (cost_row("cand", priced=9), Verdict.MISSING, None),
        (cost_row("cand", live=False), Verdict.MISSING, None),
    ],
)
def test_cost_per_pass(row: ArmCost, verdict: Verdict, estimate: float | None) -> None:
    # On the interval over tasks: $0.50 a pass observed on 4 passes of 10 is undecided
    # against $0.50 (Fieller: [0.26, 6.5]), $0.20 on 8 passes of 10 is below it.
    table = CostTable((cost_row(CONTROL), row), None)
    (found,) = only({"cost_per_pass_max": 0.5}, cost=table)
    assert found.verdict is verdict and found.threshold == 0.5
    assert found.estimate == (None if estimate is None else pytest.approx(estimate))
    if verdict in (Verdict.PASS, Verdict.UNDECIDED) or estimate == pytest.approx(0.6):
        assert found.low is not None and found.high is not None and found.n == 10
        assert found.low <= found.estimate <= found.high


def test_cost_ratio_against_the_control_and_nothing_priced() -> None:
    control = cost_row(CONTROL, usd=1.0, passes=10)  # $0.10 a pass on every task
    table = CostTable((control, cost_row("cand", usd=1.5, passes=10)), None)
    (found,) = only({"cost_ratio_max": 1.6}, cost=table)
    assert (found.verdict, found.estimate) == (Verdict.PASS, pytest.approx(1.5))
    (found,) = only({"cost_ratio_max": 1.4}, cost=table)
    assert found.verdict is Verdict.FAIL
    noisy = CostTable((control, cost_row("cand", usd=1.5, passes=4)), None)
    (found,) = only({"cost_ratio_max": 4.0}, cost=noisy)  # 3.75 observed, 4 passes of 10
    assert found.verdict is Verdict.UNDECIDED and found.estimate == pytest.approx(3.75)
    assert found.low is not None and found.high is not None and found.low < 4.0 < found.high
    unpriced_control = CostTable((cost_row(CONTROL, priced=0), cost_row("cand")), None)
    (found,) = only({"cost_ratio_max": 2}, cost=unpriced_control)
    assert found.verdict is Verdict.MISSING and found.detail.startswith("control:")
    neither = CostTable((cost_row(CONTROL, passes=0), cost_row("cand", passes=0)), None)
    (found,) = only({"cost_ratio_max": 2}, cost=neither)
    assert (found.verdict, found.detail) == (
        Verdict.MISSING,
        "neither the arm nor the control passed",
    )
    free = CostTable((cost_row(CONTROL, usd=0.0), cost_row("cand", usd=0.4)), None)
    (found,) = only({"cost_ratio_max": 100}, cost=free)
    assert (found.verdict, found.estimate) == (Verdict.FAIL, math.inf)
    (found,) = only({"cost_per_pass_max": 1.0}, cost=None)
    assert (found.verdict, found.detail) == (Verdict.MISSING, "nothing priced in this run")


def test_the_error_ceiling_holds_for_each_gated_arm_and_the_control() -> None:
    found = only({"error_rate_max": 0.1}, errors=1)
    assert [(c.arm, c.verdict, c.estimate) for c in found] == [
        ("cand", Verdict.PASS, 0.1),
        (CONTROL, Verdict.PASS, 0.0),
    ]
    (cand, _) = only({"error_rate_max": 0.1}, errors=2)
    assert (cand.verdict, cand.n) == (Verdict.FAIL, 10)


def test_preconditions_a_withheld_headline_and_required_rows() -> None:
    spec = GateSpec(superiority=0.0)
    rows = [*HOLD[1:], Row(DEFAULT_REQUIRED_ROWS[0], False, "retries used 2")]
    decision = decide(spec, scores(), rows, False, None)
    failing = [c for c in decision.criteria if c.verdict is Verdict.FAIL]
    assert [(c.name, c.row, c.detail) for c in failing] == [
        (PRECONDITION, DEFAULT_REQUIRED_ROWS[0], "retries used 2")
    ]
    assert (decision.overall, decision.exit_code) == (Verdict.FAIL, 1)
    withheld = decide(spec, scores(), HOLD, True, None)
    assert withheld.criteria[0].verdict is Verdict.FAIL and withheld.exit_code == 1
    assert decide(spec, scores(), HOLD, False, None).exit_code == 0
    # a publication row failing is not required by default; require: makes it so
    pack = Row("pack size", False, "12 tasks")
    assert decide(spec, scores(), [*HOLD, pack], False, None).exit_code == 0
    strict = GateSpec(superiority=0.0, require=["pack size", "no such row"])
    found = decide(strict, scores(), [*HOLD, pack], False, None)
    pre = [(c.row, c.verdict) for c in found.criteria if c.name == PRECONDITION]
    assert pre[1:] == [("pack size", Verdict.FAIL), ("no such row", Verdict.MISSING)]


def test_overall_fail_outweighs_undecided_and_missing_is_never_0() -> None:
    def of(*verdicts: Verdict) -> GateDecision:
        return GateDecision(tuple(Criterion("x", "a", v) for v in verdicts), ())

    assert of(Verdict.PASS, Verdict.PASS).exit_code == 0
    assert of(Verdict.PASS, Verdict.UNDECIDED).exit_code == 5
    assert of(Verdict.PASS, Verdict.MISSING).exit_code == 5
    assert of(Verdict.UNDECIDED, Verdict.FAIL, Verdict.MISSING).exit_code == 1
    assert of().exit_code == 5
    from runner.errors import DeltarunError

    taken = {0, 1, 2, 3, 4, 130}
    codes = {cls.exit_code for cls in [DeltarunError, *_subclasses(DeltarunError)] if cls.exit_code}
    assert codes <= taken and EXIT_CODES[Verdict.UNDECIDED] not in taken
    assert EXIT_CODES == {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.UNDECIDED: 5}


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in [direct, *_subclasses(direct)]]


def test_helped_and_hurt_tasks_come_from_the_cases() -> None:
    cases = [
        CaseDelta("a", "miss", "success", 0.0, 1.0, 1.0),
        CaseDelta("b", "success", "miss", 1.0, 0.0, -1.0),
        CaseDelta("c", "success", "success", 1.0, 1.0, 0.0),
        CaseDelta("d", "error", "success", None, 1.0, None),
    ]
    from runner.evidence.scoring import Scores

    found = Scores(
        [summary(CONTROL, True), summary("cand")], [delta("cand", (0.1, 0.2), 3, cases)], []
    )
    (tasks,) = decide(GateSpec(superiority=0), found, HOLD, False, None).tasks
    assert (tasks.arm, tasks.helped, tasks.hurt) == ("cand", ("a",), ("b",))


# --------------------------------------------------------------------------- the models


def test_a_gate_needs_a_criterion_and_forbids_unknown_keys_and_booleans() -> None:
    with pytest.raises(ValidationError, match="at least one criterion"):
        GateSpec(arms=["cand"])
    with pytest.raises(ValidationError, match="extra"):
        GateSpec.model_validate({"superiority": 0, "superiorty": 0})
    with pytest.raises(ValidationError):  # `true` is not a margin of 1
        GateSpec.model_validate({"superiority": True})
    with pytest.raises(ValidationError):
        GateSpec(non_inferiority=1.5)
    for name, field in GateSpec.model_fields.items():
        assert field.description, name


CONTROLS = """
protocol_id: p
suite: {file: tasks.jsonl, sha256: abc}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: scripted, action: abstain}}
"""


def test_the_gate_is_hashed_only_when_present_and_names_candidate_arms() -> None:
    plain = Controls.model_validate(yaml.safe_load(CONTROLS))
    gated = Controls.model_validate({**yaml.safe_load(CONTROLS), "gate": {"non_inferiority": 0.05}})
    other = Controls.model_validate({**yaml.safe_load(CONTROLS), "gate": {"non_inferiority": 0.1}})
    hashes = {protocol_hash(c, {}) for c in (plain, gated, other)}
    assert len(hashes) == 3
    # without gate:, the dump the hash reads has no gate key: older protocols hash as before
    assert protocol_hash(plain, {}) == protocol_hash(
        Controls.model_validate({**yaml.safe_load(CONTROLS), "gate": None}), {}
    )
    for arms in (["ctrl"], ["nope"]):
        with pytest.raises(ValidationError, match=r"gate\.arms"):
            Controls.model_validate(
                {**yaml.safe_load(CONTROLS), "gate": {"arms": arms, "superiority": 0}}
            )
