"""The publishability checklist: what a sceptical reviewer asks of a number. Pure.

Each row is evaluated from the run's own records, its run.json and its locked
controls, never a constant: every row has a test in which it fails. All rows
hold: ``publishable``. Otherwise ``demo``, with the failing rows named. Two or
more failing *integrity* rows withhold the headline number from the summary
line; the two *publication* rows (channel scored, pack size) say whether a
number may be published, not whether it is right, and an exploratory run
already carries its stamp, so they do not withhold it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.config.controls import Controls
from runner.evidence.scoring import Scores
from runner.evidence.stats import sign_test_greater, sign_test_min_pairs
from runner.records import Outcome, Record
from runner.report import same_limits
from runner.report.accountings import retries_row

WITHHOLD_AT = 2
# A publishable headline needs a pack of at least this many ordinary and negative tasks.
PACK_ORDINARY, PACK_NEGATIVE = 20, 10
# A live (model-driven) arm is sampled at least this many times per task.
MIN_MODEL_REPEATS = 3
PUBLICATION_ROWS = frozenset({"channel scored", "pack size", "no setup warnings"})
# An arm's errors follow it when, on the (task, repeat) pairs where exactly one of arm and
# control errored, the arm's side is larger and either the one-sided exact sign test puts
# the excess beyond chance at this level, or there are fewer pairs than that test needs to
# ever get there (all one way): an excess is called chance only where it could have been
# called otherwise.
ERRORS_ALPHA = 0.05
ERRORS_MIN_PAIRS = sign_test_min_pairs(ERRORS_ALPHA)  # 5: 1/32 < 0.05 <= 1/16


# Seed 004's decision table: for a failing row, what may be published instead of the number.
PUBLISH_INSTEAD = {
    "suite digest matches": "demo, suite unpinned",
    "pass is defined by a hidden test the agent could not read": "prompt eval, not agent eval",
    "every repository task is graded by declared tests": "prompt eval, not agent eval",
    "retries zero in the headline run": "a separate retry study",
    "n and 95% intervals present": "no public number",
    "tokens per pass and wall time present": "correctness plus envelope",
    "replay reproduces the report": "internal note only",
}
# Any other failing integrity row: the number is not defensible as it stands.
PUBLISH_OTHERWISE = "no public number until the row holds"


@dataclass(frozen=True)
class Row:
    item: str
    ok: bool
    detail: str


def evaluate(
    controls: Controls,
    suite_sha256: str,
    scores: Scores,
    trials: Sequence[Record],
    negative_tasks: int,
    edited: bool,
    tasks: Sequence[Mapping[str, str]] = (),
    *,
    replay_ok: bool = True,
    setup: Sequence[str] = (),
    retried: Sequence[Record] = (),
) -> list[Row]:
    """Every row of the checklist, in a fixed order.

    ``tasks`` are run.json's task entries; ``replay_ok`` whether the report, derived
    again from the ledger just written, came out byte for byte the same; ``setup`` the
    setup warnings (``runner.store.setup_warnings``); ``retried`` the error records
    ``run --retry-errors`` superseded (``runner.store.rundir``).

    Longer than the house's ~60 lines on purpose: one ``Row`` per item, side by side in
    the order the report prints them, so a reader checks each against its rule at once;
    the rows that need more than an expression have their own function below."""
    pinned = controls.suite.sha256
    retries = sum(t.retries_used for t in trials) + sum(t.retries_used for t in retried)
    arms = scores.summaries
    no_n = [s.arm for s in arms if s.n == 0]
    no_ci = [d.arm for d in scores.deltas if d.ci95 is None]
    no_refusal = [s.arm for s in arms if s.abstention_accuracy.n == 0]
    control = next((s for s in arms if s.control), None)
    mismatched = sum(t.route_mismatch for t in trials)
    return [
        Row(
            "suite digest matches",
            bool(pinned) and pinned == suite_sha256,
            f"controls pin {pinned[:12] or 'nothing'}, the run verified {suite_sha256[:12]}",
        ),
        _hidden_row(trials, tasks),
        _grading_row(tasks),
        Row("retries zero in the headline run", *retries_row(controls, retries, retried)),
        Row(
            "n and 95% intervals present",
            not no_n and not no_ci and bool(scores.deltas),
            "every arm has n > 0 and every delta an interval"
            if not no_n and not no_ci
            else f"missing for {', '.join(no_n + no_ci) or 'every arm (no candidate)'}",
        ),
        _cost_row(controls, trials, scores),
        Row(
            "refusal slice present",
            negative_tasks > 0 and not no_refusal,
            f"{negative_tasks} negative-control task(s)"
            if negative_tasks
            else "the suite has no negative-control task",
        ),
        _same_limits_row(controls, trials, control is not None and control.trials > 0),
        _budget_row(controls),
        Row(
            "route lock held",
            mismatched == 0,
            "no trial met a model other than the locked route"
            if not mismatched
            else f"{mismatched} trial(s) recorded a route mismatch",
        ),
        _complete_row(controls, trials, tasks, [s.arm for s in arms]),
        _variance_row(controls),
        _errors_row((*trials, *retried), scores),  # errors as they happened, retried or not
        Row("channel scored", controls.channel == "scored", f"channel {controls.channel}"),
        _pack_row(tasks),
        _replay_row(edited, replay_ok),
        Row(
            "no setup warnings",
            not setup,
            "no record looks like a broken task or arm"
            if not setup
            else f"{len(setup)} warning(s): see Setup warnings",
        ),
    ]


def _named(items: Sequence[str], limit: int = 3, sep: str = ", ") -> str:
    more = len(items) - limit
    return sep.join(items[:limit]) + (f" and {more} more" if more > 0 else "")


def _hidden_row(trials: Sequence[Record], tasks: Sequence[Mapping[str, str]]) -> Row:
    """A pass rests on a hidden test the agent could not read: every ordinary repository
    task declares one, every pass on it has a verify run on record, and no hidden file
    was in the agent's workspace (``hidden_in_fixture``, recorded when the run began)."""
    item = "pass is defined by a hidden test the agent could not read"
    repo = {t["id"]: t for t in tasks if t.get("grading") in ("pytest", "exit_status", "none")}
    problems: list[str] = []
    ungraded = [
        i for i, t in repo.items() if t.get("kind") == "ordinary" and t["grading"] == "none"
    ]
    if ungraded:
        problems.append(f"no hidden test: {_named(ungraded)}")
    unverified = sorted(
        {
            t.task_id
            for t in trials
            if t.task_id in repo and t.outcome is Outcome.SUCCESS and t.verify_exit_code is None
        }
    )
    if unverified:
        problems.append(f"a pass without a verify run on record: {_named(unverified)}")
    unknown = [
        i for i, t in repo.items() if t.get("kind") == "ordinary" and "hidden_in_fixture" not in t
    ]
    if unknown:
        problems.append(
            f"not recorded whether the agent could read the hidden files: {_named(unknown)}"
        )
    exposed = [
        f"{i} ({t['hidden_in_fixture']})" for i, t in repo.items() if t.get("hidden_in_fixture")
    ]
    if exposed:
        problems.append(f"hidden files also in the agent's workspace: {_named(exposed)}")
    if not repo:
        return Row(item, True, "no repository task; answer oracles never enter a sandbox")
    if problems:
        return Row(item, False, "; ".join(problems))
    return Row(
        item,
        True,
        "every pass was verified in a second, fresh sandbox on files the agent never had",
    )


def _model_driven(controls: Controls) -> dict[str, bool]:
    """Per planned arm: does a model decide what it does (a live, sampled arm)?"""
    return {leg.name: controls.model_route(leg.arm.agent) is not None for leg in controls.legs()}


def _cost_row(controls: Controls, trials: Sequence[Record], scores: Scores) -> Row:
    """Tokens per pass and wall time, measured: a model-driven arm whose trials report no
    token usage at all is "not metered", and fails the row."""
    item = "tokens per pass and wall time present"
    live = _model_driven(controls)
    metered: dict[str, int] = {}
    for t in trials:
        if t.outcome is not Outcome.ERROR:
            metered[t.arm] = metered.get(t.arm, 0) + t.prompt_tokens + t.completion_tokens
    missing = [s.arm for s in scores.summaries if s.wall_s_per_task is None]
    unmetered = [
        s.arm for s in scores.summaries if live.get(s.arm) and s.trials and not metered.get(s.arm)
    ]
    if missing or unmetered:
        parts = [f"no wall time: {_named(missing)}"] if missing else []
        parts += (
            [f"not metered (no token usage reported): {_named(unmetered)}"] if unmetered else []
        )
        return Row(item, False, "; ".join(parts))
    return Row(item, True, "wall time for every arm; token usage for every model-driven arm")


# What a model-driven arm may set for itself (its route's and its agent's), field by field.
BUDGET_FIELDS = (
    "temperature", "max_output_tokens", "request_timeout_s", "max_attempts", "seed", "max_turns",
)  # fmt: skip


def _same_limits_row(controls: Controls, trials: Sequence[Record], control_ran: bool) -> Row:
    """The control ran, and every arm ran each task under the control's limits and image, as
    the records say (``runner.report.same_limits``)."""
    item = same_limits.ITEM
    if not control_ran:
        return Row(item, False, "the control arm has no record")
    differ = same_limits.same_limits_differences(controls, trials)
    if differ:
        return Row(item, False, f"{len(differ)} difference(s): {_named(differ, sep='; ')}")
    if not same_limits.any_limits(trials):  # records from before ``limits``: the image only
        return Row(
            item,
            True,
            f"every arm ran each task on the control's image; one timeout "
            f"({controls.runtime.timeout_s:g}s), limits, network ({controls.runtime.network}) "
            "and tool allowlist for the run",
        )
    return Row(
        item,
        True,
        "every arm ran each task on the control's image under its timeouts, resources, "
        "runtime, tools, forbidden paths and repeats, as the records say; the model-driven "
        "arms under one network and model settings",
    )


def _budgets(controls: Controls) -> dict[str, dict[str, object]]:
    """Each model-driven arm's budget fields (``BUDGET_FIELDS``)."""
    found: dict[str, dict[str, object]] = {}
    for arm in controls.arms:
        route = controls.model_route(arm.agent)
        if route is None:
            continue
        values = {name: getattr(route, name, None) for name in BUDGET_FIELDS}
        values["max_turns"] = getattr(arm.agent, "max_turns", None)
        found[arm.name] = values
    return found


def _budget_row(controls: Controls) -> Row:
    """Equal budgets: timeouts, tools, limits and the trial and run budgets are one per run
    (the one controls file); every field a model-driven arm can still set for itself (its
    route's temperature, output tokens, request timeout, attempts and seed, its turn limit)
    must agree across the model-driven arms: a difference names the arm and the field."""
    item = "equal budgets"
    budgets = _budgets(controls)
    differ = []
    for name in BUDGET_FIELDS:
        # A seed set on one arm only differs too; a turn limit only where the agent has one.
        values = {a: b[name] for a, b in budgets.items() if name != "max_turns" or b[name]}
        if len(set(map(repr, values.values()))) > 1:
            listed = ", ".join(f"{arm} {value}" for arm, value in sorted(values.items()))
            differ.append(f"{name} ({listed})")
    if differ:
        return Row(item, False, "model-driven arms differ in " + "; ".join(differ))
    shared = f"one timeout ({controls.runtime.timeout_s:g}s), tool allowlist and limits"
    budget = controls.budget
    if budget is not None:
        shared += ", trial and run budgets"
    return Row(
        item,
        True,
        shared
        + " for every arm"
        + (f"; {len(budgets)} model-driven arm(s) with the same {', '.join(BUDGET_FIELDS)}"
           if budgets else ""),
    )  # fmt: skip


def _complete_row(
    controls: Controls,
    trials: Sequence[Record],
    tasks: Sequence[Mapping[str, str]],
    arms: Sequence[str],
) -> Row:
    """Every planned (task, arm, repeat) has exactly one record, and no record is unplanned."""
    item = "run complete"
    planned = {
        (t["id"], arm, r) for t in tasks for arm in arms for r in range(controls.runtime.repeats)
    }
    seen: dict[tuple[str, str, int], int] = {}
    for t in trials:
        key = (t.task_id, t.arm, t.repeat)
        seen[key] = seen.get(key, 0) + 1
    missing = len(planned - seen.keys())
    extra = len(seen.keys() - planned)
    doubled = sum(1 for n in seen.values() if n > 1)
    if not planned or missing or extra or doubled:
        return Row(
            item,
            False,
            f"{len(planned)} planned jobs: {missing} without a record, {extra} unplanned, "
            f"{doubled} with more than one record",
        )
    return Row(item, True, f"{len(planned)} planned jobs, one record each")


def _variance_row(controls: Controls) -> Row:
    """A single-shot live score is not evidence: model-driven arms are sampled repeatedly."""
    item = "variance measured"
    live = sorted(name for name, driven in _model_driven(controls).items() if driven)
    repeats = controls.runtime.repeats
    if live and repeats < MIN_MODEL_REPEATS:
        return Row(
            item,
            False,
            f"runtime.repeats is {repeats} for model-driven arm(s) {_named(live)}; "
            f"set it to {MIN_MODEL_REPEATS} or more",
        )
    if live:
        return Row(item, True, f"{repeats} repeats of every model-driven arm")
    return Row(item, True, "no model-driven arm: every arm is deterministic")


def _pack_row(tasks: Sequence[Mapping[str, str]]) -> Row:
    ordinary = sum(t.get("kind") == "ordinary" for t in tasks)
    negative = sum(t.get("kind") == "negative" for t in tasks)
    ok = ordinary >= PACK_ORDINARY and negative >= PACK_NEGATIVE
    return Row(
        "pack size",
        ok,
        f"{ordinary} ordinary and {negative} negative task(s)"
        + ("" if ok else f"; a publishable pack has {PACK_ORDINARY} and {PACK_NEGATIVE}"),
    )


def _replay_row(edited: bool, replay_ok: bool) -> Row:
    item = "replay reproduces the report"
    if edited:
        return Row(
            item, False, "the ledger was edited after the run (accepted with --accept-edits)"
        )
    if not replay_ok:
        return Row(item, False, "the report derived again from the ledger came out different")
    return Row(item, True, "derived twice from the pinned ledger and controls: the same bytes")


def _grading_row(tasks: Sequence[Mapping[str, str]]) -> Row:
    """Every ordinary repository task is graded on declared tests, not an exit status."""
    item = "every repository task is graded by declared tests"
    alone = [
        t["id"]
        for t in tasks
        if t.get("kind") == "ordinary" and t.get("grading", "exit_status") == "exit_status"
    ]
    if not alone:
        return Row(item, True, "a pass needs each declared test to run and pass")
    named = ", ".join(alone[:3]) + (f" and {len(alone) - 3} more" if len(alone) > 3 else "")
    return Row(
        item,
        False,
        f"{len(alone)} task(s) graded by exit status alone ({named}); declare hidden_tests",
    )


def _errors_row(trials: Sequence[Record], scores: Scores) -> Row:
    """Errors that follow an arm are suspected to be caused by it, so the row passes only
    when the records support chance. Each arm is compared with the control on the same
    (task, repeat): ``b`` pairs where only the arm erred, ``c`` where only the control did.

    ``b <= c`` passes: the arm errs no more often than its control. ``b > c`` fails when
    the one-sided exact sign test gives ``p < ERRORS_ALPHA``, and also when ``b + c`` is
    below ``ERRORS_MIN_PAIRS``: there even all pairs one way stay above alpha, so the
    test could never call the excess beyond chance and its silence says nothing (three
    tasks run once: 3 errors against 0 is p = 1/8). An excess passes only on enough
    pairs for the test to have spoken. An error of the arm on a (task, repeat) the
    control has no record of has nothing to be compared with, so it cannot be called
    chance either and fails the row (``run complete`` fails with it); a record of either
    side that erred makes the pair count as erred when a job has more than one record."""
    item = "errors do not follow the arm"
    control = next((s.arm for s in scores.summaries if s.control), None)
    errored: dict[tuple[str, int, str], bool] = {}
    for t in trials:
        key = (t.task_id, t.repeat, t.arm)
        errored[key] = errored.get(key, False) or t.outcome is Outcome.ERROR
    failing: list[str] = []
    counts: list[str] = []
    for summary in scores.summaries:
        if summary.control:
            continue
        b = c = unpaired = 0
        for (task_id, repeat, arm), failed in errored.items():
            if arm != summary.arm:
                continue
            other = None if control is None else errored.get((task_id, repeat, control))
            if other is None:
                unpaired += failed
            elif failed != other:
                b, c = (b + 1, c) if failed else (b, c + 1)
        problem, count = _errors_follow(b, c, unpaired)
        if problem:
            failing.append(f"{summary.arm}: {problem}")
        elif count:
            counts.append(f"{summary.arm} {count}")
    rule = (
        f"an arm erring more often than the control passes only with {ERRORS_MIN_PAIRS} or "
        f"more such pairs and a one-sided exact sign test p ≥ {ERRORS_ALPHA:g}"
    )
    if failing:
        return Row(
            item,
            False,
            _named(failing, sep="; ")
            + "; compared with the control on the same (task, repeat), counting the pairs "
            + f"where exactly one of them erred: {rule}",
        )
    if not counts:
        return Row(item, True, "no arm errs where its control does not")
    return Row(
        item,
        True,
        "(task, repeat) pairs where only the arm / only the control erred: "
        + ", ".join(counts)
        + f"; {rule}",
    )


def _errors_follow(b: int, c: int, unpaired: int) -> tuple[str, str]:
    """One arm's side of the errors row: what fails it (empty when nothing does) and its
    counts ``b vs c``, with the p-value when an excess made the sign test worth running."""
    problems = (
        [f"{unpaired} error(s) on a (task, repeat) the control has no record of, not comparable"]
        if unpaired
        else []
    )
    count = f"{b} vs {c}" if b or c else ""
    said = f"{b} error(s) where the control had none, {c} the other way"
    if b > c and b + c < ERRORS_MIN_PAIRS:
        problems.append(f"too few pairs to call it chance: {said}")
    elif b > c:
        p = sign_test_greater(b, c)
        count += f" (p = {p:.3g})"
        if p < ERRORS_ALPHA:
            problems.append(f"beyond chance: {said}, p = {p:.3g} < {ERRORS_ALPHA:g}")
    return " and ".join(problems), count


def verdict(rows: Sequence[Row]) -> str:
    return "publishable" if all(r.ok for r in rows) else "demo"


def publish_instead(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """(failing row, what may be published instead) for every failing integrity row, by
    seed 004's decision table; the publication rows say whether, not what, so none here."""
    return [
        (r.item, PUBLISH_INSTEAD.get(r.item, PUBLISH_OTHERWISE))
        for r in rows
        if not r.ok and r.item not in PUBLICATION_ROWS
    ]


def withhold_headline(rows: Sequence[Row]) -> bool:
    return sum(not r.ok for r in rows if r.item not in PUBLICATION_ROWS) >= WITHHOLD_AT
