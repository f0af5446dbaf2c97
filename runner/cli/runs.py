"""Commands about runs: run, status, report, compare, replay, export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from typer import Argument, Option

from runner.cli import common as c
from runner.cli.common import Parallel, RunDirArg, app, err, say
from runner.cli.groups import takes_groups
from runner.errors import UsageError

# The options only `run` takes whose help needs more than a line.
ExpectProtocol = Annotated[
    str | None,
    Option(
        "--expect-protocol",
        help="Pre-registered protocol hash: refuse (exit 3) if the controls hash otherwise",
    ),
]
Registry = Annotated[
    str | None,
    Option(
        "--registry",
        help="HOST:PORT of an image registry: push the run's images there for workers "
        "to pull by digest, and keep its archives there instead of in Redis (needs --broker)",
    ),
]
BlobWarn = Annotated[
    str,
    Option(
        "--blob-warn",
        help="Without --registry: warn when the run's archives in Redis memory exceed this "
        "size (e.g. 256m, 2g)",
    ),
]
BaselineMode = Annotated[
    str | None,
    Option(
        "--baseline-mode",
        help="skill-on | skill-off | both: run each arm with toggles as authored, with its "
        "toggles applied (<arm>-off), or as both legs with a scorecard.json; default: each "
        "arm's baseline: (skill-on when unset). Part of the protocol hash",
    ),
]
AllowMissing = Annotated[
    bool,
    Option(
        "--allow-missing",
        help="Run patch arms that lack a recorded output for some tasks: each counts as "
        "an empty answer, and the report's setup warnings name them",
    ),
]


UntilDecided = Annotated[
    bool,
    Option(
        "--until-decided",
        help="Stop as soon as the gate is decided. The tasks run in the seeded order of the "
        "controls' gate.sequential block, block by block (every arm and repeat of a block "
        "before the next); after each block the gate's delta criteria are looked at with "
        "a group-sequential boundary, and the run stops once every one passes or fails, "
        "or the suite is spent. Writes looks.json; `deltarun gate` then decides on the "
        "interval valid after the stop (docs/ci.md). On the local pool or a broker's workers.",
    ),
]


RetryErrors = Annotated[
    bool,
    Option(
        "--retry-errors",
        help="On an existing run directory: run again only the jobs whose record is an "
        "infrastructure error (never a miss or a timeout). The error records stay in "
        "trials.jsonl for audit; the report scores each job's newest record and says how "
        "many were retried. A scored run needs runtime.retry_errors in its controls "
        "(declared before it started). With --resume, jobs without a record run too.",
    ),
]


@app.command()
@takes_groups
def run(
    controls: Annotated[Path, Argument(help="controls.yaml")],
    out_dir: Annotated[Path, Option("--out", help="Run directory to create or resume")],
    parallel: Parallel = 2,
    resume: Annotated[bool, Option("--resume", help="Run only jobs without a record")] = False,
    *,
    broker: c.BrokerFlags,
    job_key_file: c.JobKeyFile = None,
    visibility_timeout: c.VisibilityTimeout = 7200,
    expect_protocol: ExpectProtocol = None,
    registry: Registry = None,
    allow_missing: AllowMissing = False,
    baseline_mode: BaselineMode = None,
    blob_warn: BlobWarn = "256m",
    until_decided: UntilDecided = False,
    retry_errors: RetryErrors = False,
) -> None:
    """Run every (task, arm, repeat) job and write the report.

    Without a broker, trials run here, -j at a time. With one (--broker, --broker-file
    or $DELTARUN_BROKER_URL), jobs signed with the job key go to `deltarun worker`
    processes through Celery on Redis and records stream back.
    With --registry too, the run's images are pushed there (once) and workers
    that lack one pull it by digest, keeping it only with the pinned image ID; the
    run's archives are kept there too, out of Redis memory.
    """
    from runner.run.report_files import report_headline
    from runner.run.service import RunOptions, RunService
    from runner.sizes import parse_size
    from runner.view.static_site import bundle_beside_report

    try:
        blob_warn_bytes = parse_size(blob_warn)
    except ValueError as exc:
        raise UsageError(f"--blob-warn: {exc}") from None
    if until_decided:  # a gate without a sequential block is refused before Redis is reached
        RunService.check_until_decided(controls, RunOptions(out_dir, until_decided=True))
    if retry_errors:  # refused in one line before Redis is reached
        from runner.run.retry import check_retry

        check_retry(controls, out_dir, until_decided)
    with c.Shown() as events:
        found = broker.find()
        options = RunOptions(
            out_dir=out_dir,
            parallel=parallel,
            resume=resume,
            broker=found,
            job_key=c.job_key_of(job_key_file) if found is not None else None,
            visibility_timeout_s=visibility_timeout,
            expect_protocol=expect_protocol,
            registry=registry,
            allow_missing=allow_missing,
            baseline_mode=baseline_mode,
            blob_warn_bytes=blob_warn_bytes,
            until_decided=until_decided,
            retry_errors=retry_errors,
        )
        prepared = RunService(events).run(controls, options)
    say(report_headline(prepared.run_dir.path) + bundle_beside_report(prepared.run_dir.path))


@app.command()
@takes_groups
def status(
    run_dir: Annotated[Path, Argument(help="Run directory (the --out of a run)")],
    broker: c.BrokerFlags,
) -> None:
    """Where a run stands, from any terminal: per arm recorded (by outcome), running and
    waiting jobs, the oldest running trial; with --broker, the workers seen with their
    queues and any queue of the run that no live worker consumes."""
    import time

    from runner.run.status_sources import gather

    found = broker.find()
    say(gather(run_dir, found.url if found is not None else None, time.time()), markup=False)


@app.command()
def report(run_dir: RunDirArg) -> None:
    """Score the ledger of a run and write report.md (for people), report.json (for
    programs: runner/schemas/report.schema.json) and report.html (one self-contained
    page with plots) into RUN_DIR, and the trial-by-trial viewer's pages into RUN_DIR/view
    (which report.html links), then print the headline."""
    from runner.run.report_files import report_headline
    from runner.view.static_site import bundle_beside_report

    say(report_headline(run_dir) + bundle_beside_report(run_dir))


@app.command()
def compare(
    run_a: Annotated[Path, Argument(help="Reference run directory (plays the control)")],
    run_b: Annotated[Path, Argument(help="Candidate run directory")],
    arm: Annotated[
        str | None,
        Option("--arm", help="Arm of RUN_A (and of RUN_B without --arm-b); default: all"),
    ] = None,
    arm_b: Annotated[str | None, Option("--arm-b", help="Arm of RUN_B to pair with --arm")] = None,
) -> None:
    """Pair an arm of RUN_B with an arm of RUN_A per task and print the delta vs RUN_A.

    Without --arm, every arm both runs have is compared with itself. The runs must be
    of the same suite (exit 3 otherwise) and the same channel.
    """
    from runner.report.assemble import compare_runs

    if arm_b is not None and arm is None:
        raise UsageError("--arm-b needs --arm (the arm of RUN_A to pair it with)")
    say(compare_runs(run_a, run_b, arm, arm_b), markup=False)


@app.command()
def replay(
    run_dir: RunDirArg,
    accept_edits: Annotated[
        bool, Option("--accept-edits", help="Rebuild after ledger edits; the report says so")
    ] = False,
    reverify: Annotated[
        bool, Option("--reverify", help="Also re-run the hidden tests on the stored patches")
    ] = False,
    parallel: Parallel = 2,
    controls: Annotated[
        Path | None,
        Option(
            "--controls",
            help="With --reverify: the run's controls.yaml beside its suite (a kit's); "
            "must hash to the run's protocol",
        ),
    ] = None,
) -> None:
    """Re-check the stored digests and rebuild the report byte for byte (exit 3 if it differs);
    with --reverify, the verdicts that changed are also kept in RUN_DIR/reverify.json."""
    from runner.run.replay_steps import replay_steps

    if controls is not None and not reverify:
        raise UsageError("--controls says where the suite is for --reverify; add --reverify")

    def progress(done: int, total: int) -> None:
        if not err.is_terminal:
            err.print(f"reverify [{done}/{total}]", highlight=False)

    say(replay_steps(run_dir, accept_edits, reverify, parallel, controls, progress))


@app.command()
def export(
    run_dir: RunDirArg,
    kit: Annotated[Path, Option("--kit", help="Directory to write the kit into (new/empty)")],
    controls: Annotated[
        Path | None,
        Option(
            "--controls",
            help="The run's controls.yaml where its inputs now are (default: run.json's path)",
        ),
    ] = None,
) -> None:
    """Write a kit a stranger can rerun: controls, suite, agents, evidence and replay.sh."""
    from runner.export.kit_steps import export_steps

    say(export_steps(run_dir, kit, controls))
