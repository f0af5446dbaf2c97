"""Commands about runs: run, status, report, compare, replay, export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.common import (
    BrokerCa,
    BrokerCert,
    BrokerFile,
    BrokerKey,
    BrokerUrl,
    JobKeyFile,
    Shown,
    app,
    broker_of,
    err,
    job_key_of,
    out,
    print_headline,
)
from runner.errors import UsageError

if TYPE_CHECKING:
    pass


@app.command()
def run(
    controls: Annotated[Path, typer.Argument(help="controls.yaml")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run directory to create or resume")],
    parallel: Annotated[int, typer.Option("-j", "--parallel", min=1, help="Trials at once")] = 2,
    resume: Annotated[
        bool, typer.Option("--resume", help="Run only jobs without a record")
    ] = False,
    broker: BrokerUrl = None,
    broker_file: BrokerFile = None,
    broker_ca: BrokerCa = None,
    broker_cert: BrokerCert = None,
    broker_key: BrokerKey = None,
    job_key_file: JobKeyFile = None,
    visibility_timeout: Annotated[
        int, typer.Option("--visibility-timeout", help="Seconds before Redis redelivers")
    ] = 7200,
    expect_protocol: Annotated[
        str | None,
        typer.Option(
            "--expect-protocol",
            help="Pre-registered protocol hash: refuse (exit 3) if the controls hash otherwise",
        ),
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="HOST:PORT of an image registry: push the run's images there for workers "
            "to pull by digest (needs --broker)",
        ),
    ] = None,
    allow_missing: Annotated[
        bool,
        typer.Option(
            "--allow-missing",
            help="Run patch arms that lack a recorded output for some tasks: each counts as "
            "an empty answer, and the report's setup warnings name them",
        ),
    ] = False,
) -> None:
    """Run every (task, arm, repeat) job and write the report.

    Without a broker, trials run here, -j at a time. With one (--broker, --broker-file
    or $DELTARUN_BROKER_URL), jobs signed with the job key go to `deltarun worker`
    processes through Celery on Redis and records stream back.
    With --registry too, the run's images are pushed there (once) and workers
    that lack one pull it by digest, keeping it only with the pinned image ID.
    """
    from runner.report.build import write_report
    from runner.run.service import RunOptions, RunService

    with Shown() as events:
        found = broker_of(broker, broker_file, broker_ca, broker_cert, broker_key)
        options = RunOptions(
            out_dir=out_dir,
            parallel=parallel,
            resume=resume,
            broker=found,
            job_key=job_key_of(job_key_file) if found is not None else None,
            visibility_timeout_s=visibility_timeout,
            expect_protocol=expect_protocol,
            registry=registry,
            allow_missing=allow_missing,
        )
        service = RunService(events)
        if registry is not None:
            service.check_registry(options)
        prepared = service.prepare(controls, options)
        meta = prepared.meta
        total, done = len(prepared.jobs), len(prepared.jobs) - len(prepared.todo)
        where = f"broker {found.shown} ({found.source})" if found else f"-j {parallel}"
        err.print(
            f"run {meta.run_id}: {total} jobs ({done} recorded, {len(prepared.todo)} to run), "
            f"{where}, protocol {meta.protocol_sha256[:12]}, suite {meta.suite_sha256[:12]}"
        )
        service.execute(prepared, options)
    built, paths = write_report(prepared.run_dir)
    print_headline(built, paths)


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (the --out of a run)")],
    broker: BrokerUrl = None,
    broker_file: BrokerFile = None,
    broker_ca: BrokerCa = None,
    broker_cert: BrokerCert = None,
    broker_key: BrokerKey = None,
) -> None:
    """Where a run stands, from any terminal: per arm recorded (by outcome), running and
    waiting jobs, the oldest running trial; with --broker, the workers seen with their
    queues and any queue of the run that no live worker consumes."""
    import time

    from runner.run.status_sources import gather

    found = broker_of(broker, broker_file, broker_ca, broker_cert, broker_key)
    for line in gather(run_dir, found.url if found is not None else None, time.time()):
        out.print(line, highlight=False, markup=False)


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="Run directory")]) -> None:
    """Score the ledger of a run and write report.md (for people), report.json (for
    programs: runner/schemas/report.schema.json) and report.html (one self-contained
    page with plots) into RUN_DIR, then print the headline."""
    from runner.report.build import write_report
    from runner.run.rundir import RunDir

    built, paths = write_report(RunDir(run_dir))
    print_headline(built, paths)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="Reference run directory (plays the control)")],
    run_b: Annotated[Path, typer.Argument(help="Candidate run directory")],
    arm: Annotated[
        str | None,
        typer.Option("--arm", help="Arm of RUN_A (and of RUN_B without --arm-b); default: all"),
    ] = None,
    arm_b: Annotated[
        str | None, typer.Option("--arm-b", help="Arm of RUN_B to pair with --arm")
    ] = None,
) -> None:
    """Pair an arm of RUN_B with an arm of RUN_A per task and print the delta vs RUN_A.

    Without --arm, every arm both runs have is compared with itself. The runs must be
    of the same suite (exit 3 otherwise) and the same channel.
    """
    from runner.report.build import compare_runs

    if arm_b is not None and arm is None:
        raise UsageError("--arm-b needs --arm (the arm of RUN_A to pair it with)")
    for line in compare_runs(run_a, run_b, arm, arm_b):
        out.print(line, highlight=False, markup=False)


@app.command()
def replay(
    run_dir: Annotated[Path, typer.Argument(help="Run directory")],
    accept_edits: Annotated[
        bool,
        typer.Option("--accept-edits", help="Rebuild after ledger edits; the report says so"),
    ] = False,
    reverify: Annotated[
        bool,
        typer.Option("--reverify", help="Also re-run the hidden tests on the stored patches"),
    ] = False,
    parallel: Annotated[int, typer.Option("-j", "--parallel", min=1)] = 2,
    controls: Annotated[
        Path | None,
        typer.Option(
            "--controls",
            help="With --reverify: the run's controls.yaml beside its suite (a kit's); "
            "must hash to the run's protocol",
        ),
    ] = None,
) -> None:
    """Re-check the stored digests and rebuild the report byte for byte (exit 3 if it differs)."""
    from runner.report.build import replay as do_replay
    from runner.run.rundir import RunDir

    if controls is not None and not reverify:
        raise UsageError("--controls says where the suite is for --reverify; add --reverify")
    run = RunDir(run_dir)
    inputs = None
    if reverify:
        from runner.run.reverify import reverify_inputs

        inputs = reverify_inputs(run, controls)  # the suite found and checked before anything
    built = do_replay(run, accept_edits=accept_edits)
    print_headline(built, [])
    state = "rebuilt, stamped as edited" if accept_edits else "identical"
    out.print(f"replay of {run_dir}: {state}", highlight=False)
    if reverify:
        from runner.run.reverify import reverify_run
        from runner.sandbox.docker import DockerSandboxFactory
        from runner.sandbox.engine import connect

        checked, changed = reverify_run(
            run,
            DockerSandboxFactory(connect()),
            parallel,
            progress=lambda done, total: (
                err.print(f"reverify [{done}/{total}]", highlight=False)
                if not err.is_terminal
                else None
            ),
            inputs=inputs,
        )
        out.print(f"reverify: {checked} verdicts re-run, {len(changed)} changed", highlight=False)
        for item in changed:
            t = item.trial
            was, now = ("pass" if t.passed else "fail"), ("pass" if item.now_passed else "fail")
            out.print(
                f"  changed: {t.arm} {t.task_id} repeat {t.repeat}: {was} -> {now} "
                f"(job {t.job_id[:12]})",
                highlight=False,
            )


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run directory")],
    kit: Annotated[Path, typer.Option("--kit", help="Directory to write the kit into (new/empty)")],
    controls: Annotated[
        Path | None,
        typer.Option(
            "--controls",
            help="The run's controls.yaml where its inputs now are (default: run.json's path)",
        ),
    ] = None,
) -> None:
    """Write a kit a stranger can rerun: controls, suite, agents, evidence and replay.sh."""
    from runner.run.export import export_kit
    from runner.run.rundir import RunDir

    made = export_kit(RunDir(run_dir), kit, controls)
    out.print(
        f"kit {kit}: run {made.run_id}, protocol {made.protocol_sha256[:12]}, "
        f"suite {made.suite_sha256[:12]}, {made.files} files digest-checked "
        f"(controls: {made.controls})",
        highlight=False,
    )
    script = kit / "replay.sh"
    out.print(f"rerun and compare: sh {script}", highlight=False)
    out.print(f"re-verify verdicts: sh {script} --verify-only", highlight=False)
