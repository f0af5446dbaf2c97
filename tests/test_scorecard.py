"""`deltarun run --baseline-mode skill-on|skill-off|both` and scorecard.json (seed 001).

The rules of the scorecard are pure (``runner.report.scorecard``); the modes are checked
through ``prepare`` (no Docker: the plan, the controls kept, run.json, a resume) and
through the real `deltarun run` on Docker; the scorecard of a run with repeats, errors
and a missing record through the real report path, on records written as an executor
writes them, then replayed byte for byte.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.config.loader import parse_controls, protocol_hash
from runner.errors import ProtocolMismatch, UsageError
from runner.executors.contract import PreparedRun
from runner.records import Job, Outcome, TaskKind, Trial
from runner.report.scorecard import Head, LegCase, case_delta, reduce_repeats, scorecard
from runner.run.prepare import prepare
from runner.run.report_files import replay, write_report
from runner.store.rundir import RunDir
from runner.trial.record import bare_record
from tests.conftest import run_cli
from tests.helpers import make_suite, repo_task, write_agent

S, M, E = Outcome.SUCCESS, Outcome.MISS, Outcome.ERROR
AT = datetime(2026, 12, 1, tzinfo=UTC)
KEYS = [
    "schema_version",
    "suite_id",
    "suite_path",
    "generated_at",
    "skill_on_run_id",
    "skill_off_run_id",
    "skill_on_aggregate",
    "skill_off_aggregate",
    "aggregate_delta",
    "per_case",
]
CASE_KEYS = [
    "case_id",
    "skill_on_status",
    "skill_off_status",
    "skill_on_score",
    "skill_off_score",
    "delta",
]
# A skill that fixes add() on "helped" tasks, breaks nothing but keeps the agent from the
# fix on "hurt" tasks, and does not matter on "same"; SKILL=off is the off leg's toggle.
SKILLED = (
    'P=$(cat "$DELTARUN_PROMPT_FILE")\n'
    "fix() { sed -i 's/a - b/a + b/' calc/__init__.py; }\n"
    'case "$P" in\n'
    '  *helped*) [ "${SKILL:-on}" = on ] && fix ;;\n'
    '  *hurt*) [ "${SKILL:-on}" = off ] && fix ;;\n'
    "  *same*) fix ;;\n"
    "esac\n"
    "exit 0\n"
)
CTRL = {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}
TOGGLES = {"env": {"SKILL": "off"}}


def suite(
    root: Path,
    task_ids: list[str],
    arms: list[dict[str, Any]] | None = None,
    negatives: tuple[str, ...] = (),
    repeats: int = 1,
) -> Path:
    """A suite over ``task_ids`` (each prompt names its id) with the control and the
    toggled ``cand`` arm (authored without ``baseline:``: skill-on)."""
    agent = write_agent(root, "skilled", SKILLED)
    tasks = [repo_task(t, prompt=f"Fix add(). ({t})") for t in task_ids]
    tasks += [repo_task(t, kind="negative", hidden=False) for t in negatives]
    arms = arms or [CTRL, {"name": "cand", "agent": agent, "toggles": TOGGLES}]
    return make_suite(root, tasks, arms, runtime={"repeats": repeats})


def prepared(controls: Path, out: Path, mode: str | None, resume: bool = False) -> PreparedRun:
    return prepare(
        controls, out, resume=resume, image_digest=lambda image: "sha256:x", baseline_mode=mode
    )


def record(task_id: str, outcome: Outcome, kind: TaskKind = TaskKind.ORDINARY) -> Trial:
    job = Job(job_id="j", run_id="r", protocol_sha256="p", task_id=task_id, arm="a", repeat=0)
    return bare_record(job, kind, outcome, "test", AT, AT)


def leg(task_id: str, outcomes: list[Outcome]) -> list[Trial]:
    return [record(task_id, outcome) for outcome in outcomes]


# --- the rules --------------------------------------------------------------------------


def test_repeats_reduce_to_the_majority_of_their_runs_without_an_error() -> None:
    for outcomes, expected in (
        ([], LegCase("skipped", None)),
        ([E, E], LegCase("error", None)),
        ([S], LegCase("pass", 1.0)),
        ([M], LegCase("fail", 0.0)),
        ([S, S, M], LegCase("pass", 2 / 3)),
        ([M, M, S], LegCase("fail", 1 / 3)),
        ([S, M], LegCase("inconclusive", 0.5)),
        ([S, M, E], LegCase("inconclusive", 0.5)),  # the error is not a vote
        ([S, E, E], LegCase("pass", 1.0)),
        ([Outcome.TIMEOUT, S, Outcome.FALSE_ABSTAIN], LegCase("fail", 1 / 3)),
    ):
        assert reduce_repeats(leg("t", outcomes)) == expected, outcomes
    negative = [
        record("n", outcome, TaskKind.NEGATIVE)
        for outcome in (Outcome.ABSTAIN_OK, Outcome.INVALID_COMPLETION, Outcome.ABSTAIN_OK)
    ]
    assert reduce_repeats(negative) == LegCase("pass", 2 / 3)  # a correct abstention wins


def test_a_case_delta_is_pass_against_not_pass_and_null_without_a_verdict() -> None:
    def case(status: str) -> LegCase:
        return LegCase(status, None if status in ("error", "skipped") else 0.5)

    for on, off, expected in (
        ("pass", "fail", 1),
        ("pass", "inconclusive", 1),
        ("fail", "pass", -1),
        ("inconclusive", "pass", -1),
        ("pass", "pass", 0),
        ("fail", "fail", 0),
        ("inconclusive", "fail", 0),
        ("pass", "error", None),
        ("error", "fail", None),
        ("skipped", "pass", None),
        ("pass", "skipped", None),
    ):
        assert case_delta(case(on), case(off)) == expected, (on, off)


def test_a_scorecard_has_the_seeds_fields_and_values_on_a_known_case_set() -> None:
    on = [*leg("helped", [S]), *leg("same", [S]), *leg("hurt", [M]), *leg("lost", [E])]
    off = [*leg("helped", [M]), *leg("same", [S]), *leg("hurt", [S]), *leg("lost", [S])]
    on += leg("neither", [M])
    off += leg("neither", [M])
    head = Head("run-1", "digest", "suite/tasks.jsonl", "2026-12-01T00:00:00+00:00")
    ids = ["helped", "same", "hurt", "lost", "neither", "absent"]
    card = scorecard(head, on, off, ids)
    assert list(card) == KEYS and all(list(c) == CASE_KEYS for c in card["per_case"])
    rows = [
        (c["case_id"], c["skill_on_status"], c["skill_off_status"]) for c in card["per_case"]
    ] + [(c["skill_on_score"], c["skill_off_score"], c["delta"]) for c in card["per_case"]]
    assert rows == [
        ("helped", "pass", "fail"),
        ("same", "pass", "pass"),
        ("hurt", "fail", "pass"),
        ("lost", "error", "pass"),
        ("neither", "fail", "fail"),
        ("absent", "skipped", "skipped"),
        (1.0, 0.0, 1),
        (1.0, 1.0, 0),
        (0.0, 1.0, -1),
        (None, 1.0, None),
        (0.0, 0.0, 0),
        (None, None, None),
    ]
    # The aggregates are over the four cases both legs scored: 2/4 each, delta 0.
    assert {k: card[k] for k in KEYS[:-1]} == {
        "schema_version": 1,
        "suite_id": "digest",
        "suite_path": "suite/tasks.jsonl",
        "generated_at": "2026-12-01T00:00:00+00:00",
        "skill_on_run_id": "run-1-skill-on",
        "skill_off_run_id": "run-1-skill-off",
        "skill_on_aggregate": 0.5,
        "skill_off_aggregate": 0.5,
        "aggregate_delta": 0.0,
    }
    helped = scorecard(head, on + leg("extra", [S]), off + leg("extra", [M]), [*ids, "extra"])
    assert (helped["skill_on_aggregate"], helped["skill_off_aggregate"]) == (0.6, 0.4)
    assert helped["aggregate_delta"] == 0.2
    nothing = scorecard(head, leg("lost", [E]), [], ["lost"])
    assert nothing["skill_on_aggregate"] is nothing["aggregate_delta"] is None
    withheld = scorecard(head, on, off, ids, withheld=True)
    assert withheld["per_case"] == [] and list(withheld) == KEYS
    assert withheld["skill_on_aggregate"] is withheld["aggregate_delta"] is None


# --- the modes, prepared (no Docker) ----------------------------------------------------


def test_each_mode_plans_its_legs_and_is_part_of_the_protocol(tmp_path: Path) -> None:
    controls = suite(tmp_path, ["helped", "hurt"])
    legs = {
        None: ["ctrl", "cand"],
        "skill-on": ["ctrl", "cand"],
        "skill-off": ["ctrl", "cand-off"],
        "both": ["ctrl", "cand-on", "cand-off"],
    }
    hashes = {}
    for mode, expected in legs.items():
        run = prepared(controls, tmp_path / f"run-{mode}", mode)
        assert run.meta.arms == expected and {j.arm for j in run.jobs} == set(expected)
        toggled = {name: agent.toggles for name, agent in run.agents.items() if agent.toggles}
        assert {name: t.env for name, t in toggled.items()} == (
            {"cand-off": {"SKILL": "off"}} if "cand-off" in expected else {}
        )
        hashes[mode] = run.meta.protocol_sha256
        stored = RunDir(run.run_dir.path)
        assert protocol_hash(stored.stored_controls(), run.meta.agent_dir_digests) == (
            run.meta.protocol_sha256
        ), "the controls kept in the run are the controls as run"
        recorded = json.loads((run.run_dir.path / "run.json").read_text())["baseline_modes"]
        assert recorded == {"cand": mode or "skill-on"}
    assert hashes[None] == hashes["skill-on"]  # the default, said or not
    assert len({hashes["skill-on"], hashes["skill-off"], hashes["both"]}) == 3
    assert (tmp_path / "run-skill-on/controls.yaml").read_bytes() == controls.read_bytes()
    kept = (tmp_path / "run-skill-off/controls.yaml").read_text()
    assert kept.startswith("# controls.yaml as run with --baseline-mode skill-off\n")
    assert "baseline: 'off'" in kept


def test_the_controls_baseline_is_the_default_and_the_flag_overrides_it(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "skilled", SKILLED)
    arms = [CTRL, {"name": "cand", "agent": agent, "baseline": "both", "toggles": TOGGLES}]
    controls = suite(tmp_path, ["helped"], arms)
    authored = prepared(controls, tmp_path / "authored", None)
    assert authored.meta.arms == ["ctrl", "cand-on", "cand-off"]
    same = prepared(controls, tmp_path / "same", "both")
    assert same.meta.protocol_sha256 == authored.meta.protocol_sha256
    assert (tmp_path / "same/controls.yaml").read_bytes() == controls.read_bytes()
    assert prepared(controls, tmp_path / "off", "skill-off").meta.arms == ["ctrl", "cand-off"]


def test_baseline_in_the_controls_takes_bare_yaml_on_and_off() -> None:
    base = (
        "protocol_id: p\nsuite: {file: t}\narms:\n"
        "  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}\n"
        "  - {name: c, agent: {type: scripted, action: noop}, toggles: {env: {A: '1'}}"
    )
    for written, legs in (
        ("", ["ctrl", "c"]),
        (", baseline: on", ["ctrl", "c"]),  # YAML 1.1 reads a bare on as true
        (", baseline: off", ["ctrl", "c-off"]),
        (", baseline: 'off'", ["ctrl", "c-off"]),
        (", baseline: both", ["ctrl", "c-on", "c-off"]),
    ):
        controls = parse_controls(base + written + "}\n", "x")
        assert [leg.name for leg in controls.legs()] == legs, written
    on = parse_controls(base + ", baseline: on}\n", "x")
    assert on == parse_controls(base + "}\n", "x")  # one protocol: the same hash


def test_a_resume_in_another_mode_is_refused_in_one_line(tmp_path: Path) -> None:
    controls = suite(tmp_path, ["helped"])
    out = tmp_path / "run"
    first = prepared(controls, out, "both")
    for mode in ("skill-off", None):
        with pytest.raises(ProtocolMismatch) as refused:
            prepared(controls, out, mode, resume=True)
        line = str(refused.value)
        assert "\n" not in line and refused.value.exit_code == 3
        assert f"{out}: this run directory ran with --baseline-mode both" in line
        assert f"asks for --baseline-mode {mode or 'skill-on'}" in line
        assert "resume with --baseline-mode both" in line
    again = prepared(controls, out, "both", resume=True)
    assert again.meta.run_id == first.meta.run_id


def test_a_mode_that_needs_toggles_refuses_controls_without_them(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "skilled", SKILLED)
    controls = suite(tmp_path, ["helped"], [CTRL, {"name": "cand", "agent": agent}])
    for mode in ("skill-off", "both"):
        with pytest.raises(UsageError, match=f"--baseline-mode {mode}: no arm of .* has toggles"):
            prepared(controls, tmp_path / mode, mode)
    plain = prepared(controls, tmp_path / "on", "skill-on")  # the default: nothing to turn off
    assert plain.meta.arms == ["ctrl", "cand"] and plain.meta.baseline_modes == {}
    bad = run_cli("run", str(controls), "--out", str(tmp_path / "x"), "--baseline-mode", "off")
    assert bad.returncode == 2 and not (tmp_path / "x").exists()
    assert "--baseline-mode 'off': choose skill-on, skill-off or both" in bad.stderr


# --- the scorecard through the report path (no Docker) -----------------------------------

# (on leg, off leg, control) outcomes of each task's three repeats; None: no record.
PLAN: dict[str, tuple[list[Outcome] | None, list[Outcome], list[Outcome]]] = {
    "helped": ([S, S, M], [M, M, S], [M, M, M]),
    "tie": ([S, M, E], [S, S, S], [M, M, E]),
    "errored": ([E, E, E], [S, M, S], [E, E, E]),
    "skipped": (None, [M, M, M], [M, M, M]),
    "neg": (
        [Outcome.ABSTAIN_OK] * 3,
        [Outcome.INVALID_COMPLETION, Outcome.INVALID_COMPLETION, Outcome.ABSTAIN_OK],
        [Outcome.INVALID_COMPLETION] * 3,
    ),
}


def recorded_run(root: Path) -> RunDir:
    """A prepared run of ``PLAN`` with three repeats, its records written as an executor
    writes them (each pass with its verify run), and its report."""
    controls = suite(root, ["helped", "tie", "errored", "skipped"], negatives=("neg",), repeats=3)
    run = prepared(controls, root / "run", "both")
    records = []
    for job in run.jobs:
        on, off, ctrl = PLAN[job.task_id]
        outcomes = {"cand-on": on, "cand-off": off, "ctrl": ctrl}[job.arm]
        if outcomes is None:
            continue
        outcome = outcomes[job.repeat]
        kind = TaskKind.NEGATIVE if job.task_id == "neg" else TaskKind.ORDINARY
        verify = None if kind is TaskKind.NEGATIVE or outcome is E else int(outcome is not S)
        fields = {"wall_s": 1.0, "stop_reason": "submit", "verify_exit_code": verify}
        records.append(bare_record(job, kind, outcome, "test", AT, AT, **fields))
    run.run_dir.write_records(records, [])
    built, _ = write_report(run.run_dir)
    assert not built.withheld, [r.item for r in built.rows if not r.ok]
    return run.run_dir


def test_the_report_writes_the_scorecard_with_repeats_reduced(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    card = json.loads((run.path / "scorecard.json").read_text())
    report = json.loads((run.path / "report.json").read_text())
    meta = run.meta()
    assert list(card) == KEYS
    assert card["suite_id"] == meta.suite_sha256 and card["suite_path"] == "suite/tasks.jsonl"
    assert card["generated_at"] == report["baseline_legs"][0]["generated_at"] != ""
    assert card["skill_on_run_id"] == f"{meta.run_id}-skill-on"
    assert card["skill_off_run_id"] == f"{meta.run_id}-skill-off"
    assert [[c[k] for k in CASE_KEYS] for c in card["per_case"]] == [
        ["helped", "pass", "fail", 0.666667, 0.333333, 1],
        ["tie", "inconclusive", "pass", 0.5, 1.0, -1],
        ["errored", "error", "pass", None, 0.666667, None],
        ["skipped", "skipped", "fail", None, 0.0, None],
        ["neg", "pass", "fail", 1.0, 0.333333, 1],
    ]
    # Over helped, tie and neg: on (2/3 + 1/2 + 1) / 3, off (1/3 + 1 + 1/3) / 3.
    assert card["skill_on_aggregate"] == 0.722222
    assert card["skill_off_aggregate"] == 0.555556
    assert card["aggregate_delta"] == round(0.722222 - 0.555556, 6) == 0.166666
    assert [c["candidate_arm"] for c in report["baseline_legs"]] == ["cand-on"]  # kept


def test_replay_rebuilds_the_scorecard_byte_for_byte(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    path = run.path / "scorecard.json"
    written = path.read_bytes()
    replay(run)
    assert path.read_bytes() == written
    path.unlink()  # a run reported before scorecards existed gets one, the same bytes
    replay(run)
    assert path.read_bytes() == written
    path.write_bytes(written.replace(b'"delta": 1', b'"delta": 0', 1))
    result = run_cli("replay", str(run.path))
    assert result.returncode == 3
    assert "scorecard.json: the replayed report differs from the stored one" in result.stderr


def test_several_arms_with_both_legs_get_a_scorecard_each(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "skilled", SKILLED)
    arms = [
        CTRL,
        {"name": "a", "agent": agent, "toggles": TOGGLES},
        {"name": "b", "agent": agent, "toggles": {"prompt_suffix": " (hurt)"}},
    ]
    run = prepared(suite(tmp_path, ["helped"], arms), tmp_path / "run", "both")
    assert run.meta.arms == ["ctrl", "a-on", "a-off", "b-on", "b-off"]
    records = [bare_record(job, TaskKind.ORDINARY, M, "test", AT, AT) for job in run.jobs]
    run.run_dir.write_records(records, [])
    _, paths = write_report(run.run_dir)
    names = sorted(p.name for p in paths if p.name.startswith("scorecard"))
    assert names == ["scorecard-a.json", "scorecard-b.json"]
    assert not (run.run_dir.path / "scorecard.json").exists()


# --- the modes through `deltarun run` (Docker) ------------------------------------------


def run_json(out: Path, name: str) -> Any:
    return json.loads((out / name).read_text())


@pytest.mark.docker
def test_both_runs_the_two_legs_and_writes_the_scorecard(tmp_path: Path, docker_api: Any) -> None:
    controls = suite(tmp_path, ["helped-1", "helped-2", "same", "hurt"])
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), "-j", "4", "--baseline-mode", "both")
    assert result.returncode == 0, result.stderr
    assert f"report: {out / 'scorecard.json'}" in result.stdout
    meta, report, card = (run_json(out, n) for n in ("run.json", "report.json", "scorecard.json"))
    assert meta["arms"] == ["ctrl", "cand-on", "cand-off"]
    assert meta["baseline_modes"] == {"cand": "both"}
    assert report["pins"]["baseline_modes"] == {"cand": "both"}
    assert "| baseline mode of cand | both |" in (out / "report.md").read_text()
    assert "baseline mode of cand" in (out / "report.html").read_text()
    assert card == {
        "schema_version": 1,
        "suite_id": meta["suite_sha256"],
        "suite_path": "suite/tasks.jsonl",
        "generated_at": report["baseline_legs"][0]["generated_at"],
        "skill_on_run_id": meta["run_id"] + "-skill-on",
        "skill_off_run_id": meta["run_id"] + "-skill-off",
        "skill_on_aggregate": 0.75,
        "skill_off_aggregate": 0.5,
        "aggregate_delta": 0.25,
        "per_case": [
            {
                "case_id": task_id,
                "skill_on_status": on,
                "skill_off_status": off,
                "skill_on_score": float(on == "pass"),
                "skill_off_score": float(off == "pass"),
                "delta": delta,
            }
            for task_id, on, off, delta in (
                ("helped-1", "pass", "fail", 1),
                ("helped-2", "pass", "fail", 1),
                ("same", "pass", "pass", 0),
                ("hurt", "fail", "pass", -1),
            )
        ],
    }
    written = (out / "scorecard.json").read_bytes()
    replayed = run_cli("replay", str(out))
    assert replayed.returncode == 0 and "identical" in replayed.stdout, replayed.stderr
    assert (out / "scorecard.json").read_bytes() == written
    other = run_cli(
        "run", str(controls), "--out", str(out), "--resume", "--baseline-mode", "skill-off"
    )
    assert other.returncode == 3
    assert other.stderr.strip().count("\n") == 0
    assert "ran with --baseline-mode both, this run asks for --baseline-mode skill-off" in (
        other.stderr
    )


@pytest.mark.docker
def test_skill_on_and_skill_off_run_one_leg(tmp_path: Path, docker_api: Any) -> None:
    controls = suite(tmp_path, ["helped", "hurt"])
    for mode, arm, outcomes in (
        (None, "cand", {"helped": "success", "hurt": "miss"}),  # skill-on, the default
        ("skill-off", "cand-off", {"helped": "miss", "hurt": "success"}),
    ):
        out = tmp_path / f"run-{mode}"
        flag = ["--baseline-mode", mode] if mode else []
        result = run_cli("run", str(controls), "--out", str(out), "-j", "4", *flag)
        assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
        assert {r["arm"] for r in records} == {"ctrl", arm}
        assert {r["task_id"]: r["outcome"] for r in records if r["arm"] == arm} == outcomes
        assert run_json(out, "run.json")["baseline_modes"] == {"cand": mode or "skill-on"}
        pins = run_json(out, "report.json")["pins"]
        assert pins["baseline_modes"] == {"cand": mode or "skill-on"}
        assert not list(out.glob("scorecard*.json"))
        assert run_json(out, "report.json")["baseline_legs"] == []
