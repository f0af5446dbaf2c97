"""Bad run directories: one line naming the file and line, the right exit code, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

from runner.config.loader import parse_controls, protocol_hash
from runner.records import Outcome
from runner.store.rundir import RunDir, RunMeta
from tests.conftest import run_cli
from tests.helpers import comparison
from tests.test_scoring import trial

CONTROLS = """\
protocol_id: p
suite: {file: t, sha256: ""}
arms:
  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}
  - {name: cand, agent: {type: scripted, action: abstain}}
"""


def make_run(
    root: Path,
    controls: str = CONTROLS,
    outcomes: dict[str, tuple[Outcome, Outcome]] | None = None,
) -> Path:
    """A run directory without Docker: ``outcomes`` maps task → (control, candidate)."""
    outcomes = outcomes or {"a": (Outcome.MISS, Outcome.SUCCESS)}
    protocol = protocol_hash(parse_controls(controls, "c"), {})
    run = RunDir(root / "run")
    run.create(
        RunMeta(
            run_id="r",
            protocol_id="p",
            protocol_sha256=protocol,
            suite_sha256="s",
            channel="exploratory",
            control_arm="ctrl",
            arms=["ctrl", "cand"],
            tasks=[{"id": task, "kind": "ordinary"} for task in outcomes],
            image_digests={},
            agent_dir_digests={},
            created_at="x",
            deltarun_version="0",
            python_version="3",
        ),
        controls.encode(),
    )
    for task, pair in outcomes.items():
        for arm, outcome in zip(("ctrl", "cand"), pair, strict=True):
            run.append(trial(task, arm, outcome).model_copy(update={"protocol_sha256": protocol}))
    return run.path


def one_line(result: object, code: int, *needles: str) -> None:
    assert result.returncode == code, result.stderr  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_good_run_reports(tmp_path: Path) -> None:
    result = run_cli("report", str(make_run(tmp_path)))
    assert result.returncode == 0, result.stderr


def test_truncated_line(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    with (path / "trials.jsonl").open("a") as handle:
        handle.write('{"run_id": "r", "jo')
    one_line(run_cli("report", str(path)), 1, "trials.jsonl:3", "truncated record", "--resume")


def test_missing_ledger(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    (path / "trials.jsonl").unlink()
    one_line(run_cli("replay", str(path)), 1, "trials.jsonl", "missing")


def test_record_of_another_protocol(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    lines = (path / "trials.jsonl").read_text().splitlines()
    other = json.loads(lines[1])
    other["protocol_sha256"] = "f" * 64
    lines[1] = json.dumps(other)
    (path / "trials.jsonl").write_text("\n".join(lines) + "\n")
    one_line(run_cli("report", str(path)), 3, "trials.jsonl:2", "ffffffffffff")


def test_garbage_line(tmp_path: Path) -> None:
    path = make_run(tmp_path)
    with (path / "trials.jsonl").open("a") as handle:
        handle.write("not json at all\n")
    one_line(run_cli("report", str(path)), 1, "trials.jsonl:3", "not a valid trial record")


def test_not_a_run_directory(tmp_path: Path) -> None:
    one_line(run_cli("report", str(tmp_path)), 1, "not a run directory")


def test_report_json_matches_the_shipped_schema(tmp_path: Path) -> None:
    import jsonschema

    from runner.report.schema import ReportJSON

    shipped = Path(__file__).resolve().parents[1] / "runner" / "schemas" / "report.schema.json"
    schema = json.loads(shipped.read_text())
    assert schema == json.loads(json.dumps(ReportJSON.model_json_schema())), (
        "runner/schemas/report.schema.json is stale: regenerate it from runner.report.schema"
    )
    path = make_run(tmp_path)
    assert run_cli("report", str(path)).returncode == 0
    report = json.loads((path / "report.json").read_text())
    jsonschema.validate(report, schema)
    ReportJSON.model_validate(report)
    printed = run_cli("schema", "report")
    assert printed.returncode == 0 and json.loads(printed.stdout)["title"] == "ReportJSON"


def test_seeded_bootstrap_is_reported_and_replayable(tmp_path: Path) -> None:
    text = CONTROLS + "analysis: {bootstrap_resamples: 2000}\nruntime: {seed: 7}\n"
    outcomes = {
        f"t{i}": (Outcome.MISS, Outcome.SUCCESS if i % 3 else Outcome.MISS) for i in range(8)
    }
    run = RunDir(make_run(tmp_path, text, outcomes))
    assert run_cli("report", str(run.path)).returncode == 0
    first = comparison(json.loads((run.path / "report.json").read_text()))
    delta = first["deltas"][0]["aggregate_delta"]
    low, high = delta["bootstrap95"]
    assert low <= delta["mean"] <= high and low < high
    assert run_cli("replay", str(run.path)).returncode == 0  # the same seed, the same interval
    assert "paired bootstrap 95%" in (run.path / "report.md").read_text()
    # Every task helped: no spread to resample, so no zero-width bootstrap "interval".
    helped = {f"t{i}": (Outcome.MISS, Outcome.SUCCESS) for i in range(8)}
    uniform = RunDir(make_run(tmp_path / "uniform", text, helped))
    assert run_cli("report", str(uniform.path)).returncode == 0
    report = comparison(json.loads((uniform.path / "report.json").read_text()))
    delta = report["deltas"][0]["aggregate_delta"]
    assert delta["bootstrap95"] is None and delta["ci95"][0] < delta["ci95"][1]


def test_pins_give_the_suite_first_then_timeout_seed_and_each_route(tmp_path: Path) -> None:
    from runner.report.assemble import build_report

    live = (
        CONTROLS.replace(
            "  - {name: cand, agent: {type: scripted, action: abstain}}",
            "  - {name: cand, agent: {type: openai}}",
        )
        + 'route: {base_url: "http://127.0.0.1:9/v1", model: pinned-model, temperature: 0.5}\n'
    )
    live += "runtime: {timeout_s: 45, seed: 11}\n"
    built = build_report(RunDir(make_run(tmp_path, controls=live)))
    pins = json.loads(built.json_text)["pins"]
    assert pins["routes"] == {
        "cand": {"model": "pinned-model", "base_url": "http://127.0.0.1:9/v1", "temperature": 0.5}
    }
    assert (pins["timeout_s"], pins["seed"]) == (45, 11)
    table = built.markdown.split("## Pins")[1].split("##")[0].splitlines()
    assert table[4].startswith("| suite sha256 |")  # the first row under the header
    assert "| route of cand | `pinned-model` at `http://127.0.0.1:9/v1`, temperature 0.5 |" in table
    assert "| timeout / seed | 45 s / 11 |" in table
    assert "pinned-model at http://127.0.0.1:9/v1, temperature 0.5" in built.html
