"""The ``gate`` command: a CI decision on a finished run, as an exit code and CI's files."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from typer import Argument, Option

from runner.cli.common import RunDirArg, app, say
from runner.cli.groups import OptionGroup, takes_groups
from runner.errors import UsageError

# The options, one declaration each; the criteria are for exploratory runs only.
Junit = Annotated[
    Path | None, Option("--junit", help="Write JUnit XML: one test case per criterion")
]
Summary = Annotated[
    Path | None,
    Option(
        "--summary",
        help="Write a Markdown summary for a pull-request comment (also appended to "
        "$GITHUB_STEP_SUMMARY when that is set)",
    ),
]


Superiority = Annotated[
    float | None,
    Option(
        "--superiority",
        metavar="MARGIN",
        min=0.0,
        max=1.0,
        help="Pass when the paired delta's 95% lower bound is above MARGIN (0: plain)",
    ),
]
NonInferiority = Annotated[
    float | None,
    Option(
        "--non-inferiority",
        metavar="MARGIN",
        min=0.0,
        max=1.0,
        help="Pass when the paired delta's 95% lower bound is above -MARGIN",
    ),
]
RefusalSuperiority = Annotated[
    float | None,
    Option(
        "--refusal-superiority",
        metavar="MARGIN",
        min=0.0,
        max=1.0,
        help="--superiority on the refusal slice",
    ),
]
RefusalNonInferiority = Annotated[
    float | None,
    Option(
        "--refusal-non-inferiority",
        metavar="MARGIN",
        min=0.0,
        max=1.0,
        help="--non-inferiority, refusal slice",
    ),
]
CostPerPass = Annotated[
    float | None, Option("--cost-per-pass-max", metavar="DOLLARS", help="Dollars per pass at most")
]
CostRatio = Annotated[
    float | None,
    Option(
        "--cost-ratio-max", metavar="RATIO", help="Cost per pass at most the control's times this"
    ),
]
ErrorRate = Annotated[
    float | None,
    Option(
        "--error-rate-max",
        metavar="RATE",
        min=0.0,
        max=1.0,
        help="Infrastructure error rate at most this",
    ),
]


@dataclass(frozen=True)
class Criteria(OptionGroup):
    """The gate's criteria on the command line (exploratory runs only), one option per
    field of ``GateSpec`` of the same name."""

    superiority: Superiority = None
    non_inferiority: NonInferiority = None
    refusal_superiority: RefusalSuperiority = None
    refusal_non_inferiority: RefusalNonInferiority = None
    cost_per_pass_max: CostPerPass = None
    cost_ratio_max: CostRatio = None
    error_rate_max: ErrorRate = None

    def given(self) -> dict[str, float]:
        """The criteria given, by ``GateSpec`` field."""
        return {key: value for key, value in asdict(self).items() if value is not None}


Arms = Annotated[
    list[str] | None,
    Option(
        "--arm",
        metavar="NAME",
        help="With command-line criteria: gate this arm (repeat; default all)",
    ),
]
SecondRun = Annotated[
    Path | None,
    Argument(
        metavar="[RUN_B]",
        help="Given two runs (gate RUN_A RUN_B), RUN_B is decided against RUN_A, paired per "
        "task as compare pairs them: the same as gate RUN_B --baseline RUN_A",
        show_default=False,
    ),
]
BaselineRun = Annotated[
    Path | None,
    Option(
        "--baseline",
        metavar="RUN_A",
        help="Decide the candidate arms against this earlier run (run directory or export "
        "kit) of the same suite and runtime, paired per task",
    ),
]
BaselineArm = Annotated[
    str | None,
    Option(
        "--baseline-arm",
        metavar="NAME",
        help="With --baseline: the arm of RUN_A to decide against (default: the same-named arm)",
    ),
]


@app.command()
@takes_groups
def gate(
    run_dir: RunDirArg,
    run_b: SecondRun = None,
    *,
    junit: Junit = None,
    summary: Summary = None,
    criteria: Criteria,
    arm: Arms = None,
    baseline: BaselineRun = None,
    baseline_arm: BaselineArm = None,
) -> None:
    """Decide the run's gate: each criterion of the controls' gate: section pass, fail,
    undecided or missing, and write RUN_DIR/decision.json. Exit 0 pass, 1 fail, 5 not
    decided (docs/ci.md). Criteria on the command line replace the controls' and are
    refused for a scored run (its criteria are locked before the run). With --baseline RUN_A,
    each candidate arm is decided against RUN_A's arm instead of this run's control;
    gate RUN_A RUN_B says the same as gate RUN_B --baseline RUN_A."""
    from runner.config.gate_spec import GateSpec
    from runner.run.gate_files import gate_run

    if run_b is not None:  # gate RUN_A RUN_B: RUN_B against RUN_A, as compare pairs them
        if baseline is not None:
            raise UsageError(
                "give the baseline once: gate RUN_A RUN_B, or gate RUN_B --baseline RUN_A"
            )
        run_dir, baseline = run_b, run_dir
    chosen = criteria.given()
    spec = None
    if chosen:
        try:
            spec = GateSpec(arms=arm or None, **chosen)
        except ValidationError as exc:
            raise UsageError(f"gate criteria: {exc.errors()[0]['msg']}") from exc
    elif arm:
        raise UsageError("--arm goes with command-line criteria (e.g. --non-inferiority 0.05)")
    if baseline_arm is not None and baseline is None:
        raise UsageError(
            "--baseline-arm goes with a baseline: --baseline RUN_A, or gate RUN_A RUN_B"
        )
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    outcome = gate_run(
        run_dir, spec, junit, summary, Path(step) if step else None, baseline, baseline_arm
    )
    say(outcome.lines, markup=False)
    raise typer.Exit(outcome.exit_code)
