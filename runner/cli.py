"""The ``deltarun`` command line: seal, build, run, report, replay, gc, schema.

Every deliberate error is a ``DeltarunError``: printed as one line on stderr,
no traceback, with its exit code (1 user error, 2 usage, 3 digest or protocol
mismatch, 4 no control arm, 130 interrupted).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from runner.errors import DeltarunError, UsageError, UserError
from runner.models import Trial
from runner.report.markdown import headline_lines

if TYPE_CHECKING:
    from runner.distributed.credentials import Broker
    from runner.prepare import PreparedRun
    from runner.report.build import BuiltReport
    from runner.run_service import Recording
    from runner.validate_run import Validation

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Run coding agents on sealed suites in Docker sandboxes; report the delta vs a control.",
)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)

# The broker and job-key options every distributed command shares
# (runner/distributed/credentials.py says where each value is taken from).
BrokerUrl = Annotated[
    str | None,
    typer.Option(
        "--broker",
        help="Redis URL (redis:// or rediss:// for TLS); default $DELTARUN_BROKER_URL. "
        "A password here shows in ps: use --broker-file",
    ),
]
BrokerFile = Annotated[
    Path | None,
    typer.Option("--broker-file", help="File whose first line is the Redis URL (mode 0600)"),
]
BrokerCa = Annotated[
    Path | None,
    typer.Option("--broker-ca", help="CA (PEM) of Redis's TLS certificate [$DELTARUN_BROKER_CA]"),
]
BrokerCert = Annotated[
    Path | None,
    typer.Option("--broker-cert", help="Client certificate (PEM) [$DELTARUN_BROKER_CERT]"),
]
BrokerKey = Annotated[
    Path | None,
    typer.Option("--broker-key", help="The client certificate's key [$DELTARUN_BROKER_KEY]"),
]
JobKeyFile = Annotated[
    Path | None,
    typer.Option(
        "--job-key-file",
        help="Key that signs jobs and records; default $DELTARUN_JOB_KEY, "
        "$DELTARUN_JOB_KEY_FILE, else ~/.config/deltarun/job.key (made on first use)",
    ),
]


@app.command()
def seal(
    target: Annotated[Path, typer.Argument(help="A suite directory, tasks.jsonl or controls.yaml")],
    strip_top_folder: Annotated[
        bool,
        typer.Option(
            "--strip-top-folder",
            help="Rewrite each tar fixture whose entries all sit under one folder without it",
        ),
    ] = False,
) -> None:
    """Check every task and archive, write their digests, print the suite digest."""
    from runner.config.loader import load_controls
    from runner.sealing import seal_target

    digest, written = seal_target(
        target, load_controls, lambda line: err.print(line), strip_top_folder
    )
    out.print(digest)
    for path in written:
        err.print(f"wrote {path}")
    if target.suffix not in (".yaml", ".yml"):
        err.print(
            "no controls file was changed: a run checks the digest its controls pin, so seal "
            "through the controls to pin this one (deltarun seal controls.yaml)"
        )


@app.command()
def build(
    target: Annotated[Path, typer.Argument(help="A suite directory, tasks.jsonl or controls.yaml")],
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Build again (no cache) even when the tag exists")
    ] = False,
    network: Annotated[
        str,
        typer.Option("--network", help="Network of the builds: default (the engine's) or none"),
    ] = "default",
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Stream the engine's build output")
    ] = False,
) -> None:
    """Build each environments/<name>/ the suite's tasks name, pin the images, and seal.

    Each image is built on the sandbox base (runtime.image of the controls, else
    deltarun/sandbox-python:bookworm) passed as --build-arg BASE, tagged
    deltarun-env/<name>:<context digest>, and checked against the sandbox contract.
    """
    import time

    from runner.environments import build as build_environments
    from runner.sandbox.engine import connect
    from runner.sandbox.image_build import BUILD_TIMEOUT_S, DockerImageBuilder

    if network not in ("default", "none"):
        raise UsageError(f"--network {network!r}: choose default (the engine's) or none")

    def say(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    def progress(line: str) -> None:  # on a terminal, or asked for: an error stays one line
        if verbose or err.is_terminal:
            say(line)

    def log(line: str) -> None:
        if verbose:
            say(f"  | {line}")

    started = time.monotonic()
    result = build_environments(
        target,
        DockerImageBuilder(connect(BUILD_TIMEOUT_S)),
        rebuild=rebuild,
        network=network,
        say=progress,
        log=log,
    )
    for item in result.built:
        out.print(
            f"{item.name}  {item.tag}  {item.image_id.removeprefix('sha256:')[:12]}  "
            f"{'reused' if item.reused else 'built'}  {item.seconds:.1f}s",
            highlight=False,
            markup=False,
        )
    if not result.built:
        say(f"{target}: no task names an environment; sealed only")
    out.print(result.suite_sha256, highlight=False)
    for path in result.written:
        say(f"wrote {path}")
    say(f"{len(result.built)} environment(s) in {time.monotonic() - started:.1f}s")


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
    from runner.run_service import RunOptions, RunService

    with _Shown() as events:
        found = _broker(broker, broker_file, broker_ca, broker_cert, broker_key)
        options = RunOptions(
            out_dir=out_dir,
            parallel=parallel,
            resume=resume,
            broker=found,
            job_key=_job_key(job_key_file) if found is not None else None,
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
    _print_headline(built, paths)


class _Shown:
    """The run's ``Events`` on the terminal: a progress bar on a tty, one line per record
    otherwise; a context manager that stops the bar."""

    def __init__(self) -> None:
        self.tty = err.is_terminal
        self.progress = Progress(
            TextColumn("passes {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=not self.tty,
        )
        self.bar: TaskID | None = None
        self.arms: list[str] = []

    def __enter__(self) -> _Shown:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def note(self, line: str) -> None:
        self.progress.console.print(line, highlight=False, markup=False)

    def started(self, prepared: PreparedRun, recording: Recording, total: int) -> None:
        from runner.run_service import describe

        self.arms = list(prepared.meta.arms)
        self.progress.start()
        self.bar = self.progress.add_task(
            describe(self.arms, recording), total=total, completed=recording.recorded
        )

    def recorded(self, trial: Trial, recording: Recording, total: int) -> None:
        from runner.run_service import describe

        if self.bar is not None:
            self.progress.update(self.bar, advance=1, description=describe(self.arms, recording))
        if not self.tty:
            extra = f" ({trial.error})" if trial.error else ""
            err.print(
                f"[{recording.recorded}/{total}] {trial.arm} {trial.task_id}: "
                f"{trial.outcome.value} {trial.wall_s:.1f}s{extra}",
                highlight=False,
            )

    def setup_warning(self, text: str) -> None:
        self.progress.console.print(f"setup warning: {text}", highlight=False)


def _broker(
    url: str | None,
    file: Path | None,
    ca: Path | None,
    cert: Path | None,
    key: Path | None,
    required: bool = False,
) -> Broker | None:
    """The broker the options (or $DELTARUN_BROKER_URL) name, reached once, or None."""
    from runner.distributed.credentials import BrokerOptions
    from runner.run_service import find_broker

    options = BrokerOptions(url, file, ca, cert, key)
    return find_broker(options, os.environ, _Lines(), required=required)


def _job_key(option: Path | None) -> bytes:
    from runner.run_service import job_key

    return job_key(option, os.environ, _Lines())


class _Lines:
    """Notes as plain lines on stderr (commands without a progress bar)."""

    def note(self, line: str) -> None:
        err.print(line, highlight=False, markup=False)


def _print_headline(built: BuiltReport, paths: list[Path]) -> None:
    """The summary line(s): withheld when two or more checklist rows fail."""
    failing = [row.item for row in built.rows if not row.ok]
    if built.withheld:
        out.print(
            f"headline withheld: {len(failing)} checklist rows fail ({'; '.join(failing)}); "
            "see the report",
            highlight=False,
        )
    else:
        for line in headline_lines(built.scores):
            out.print(line, highlight=False)
        if failing:
            out.print(f"verdict: demo (failing: {'; '.join(failing)})", highlight=False)
    for path in paths:
        out.print(f"report: {path}", highlight=False)


@app.command()
def worker(
    broker: BrokerUrl = None,
    broker_file: BrokerFile = None,
    broker_ca: BrokerCa = None,
    broker_cert: BrokerCert = None,
    broker_key: BrokerKey = None,
    job_key_file: JobKeyFile = None,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", min=1)] = 2,
    queues: Annotated[
        str | None,
        typer.Option(
            "-Q",
            "--queues",
            help="Comma-separated sandbox images this worker serves (default: every image "
            "runs publish, and deltarun/sandbox-python:bookworm when present)",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Worker name (default: $DELTARUN_WORKER_NAME or host)"),
    ] = None,
    visibility_timeout: Annotated[
        int, typer.Option("--visibility-timeout", help="Seconds before Redis redelivers")
    ] = 7200,
    registry_pull: Annotated[
        bool,
        typer.Option(
            "--registry-pull/--no-registry-pull",
            help="Pull a missing image by the digest the run published (kept only with the "
            "pinned image ID)",
        ),
    ] = True,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            min=0,
            help="On SIGTERM, seconds the trials in flight may take to finish before their "
            "jobs are handed back (a second SIGTERM hands them back at once)",
        ),
    ] = 900.0,
    log_json: Annotated[
        bool, typer.Option("--log-json", help="One JSON object per log line (trial events)")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            help="Serve Prometheus metrics of this worker on http://ADDR:PORT/metrics "
            "(default: off)",
        ),
    ] = None,
    metrics_addr: Annotated[
        str,
        typer.Option(
            "--metrics-addr",
            help="Address --metrics-port listens on; 0.0.0.0 exposes the metrics to the network",
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve trials from Celery: checks Redis, Docker and the images first, reaps leftovers.

    Without -Q, serves every image runs publish (pulled by digest from the run's
    --registry when missing here) and takes on images published later. Runs only jobs
    signed with its job key (the coordinator's: same file). SIGTERM drains: no new job,
    the trials in flight finish, exit 0.
    """
    from runner.distributed.worker import serve

    found = _broker(broker, broker_file, broker_ca, broker_cert, broker_key, required=True)
    assert found is not None
    serve(
        found.url,
        concurrency=concurrency,
        images=None if queues is None else [q.strip() for q in queues.split(",") if q.strip()],
        name=name,
        visibility_timeout_s=visibility_timeout,
        say=lambda line: err.print(line, highlight=False, markup=False),
        pull=registry_pull,
        drain_timeout_s=drain_timeout,
        log_json=log_json,
        job_key=_job_key(job_key_file),
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
    )


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="A new (or empty) directory for the suite")],
) -> None:
    """Write a minimal suite to start from: one repository task, one negative control, one
    answer task; controls with a no-op control, a gold patch arm and a command arm stub;
    build_suite.py (no make) that tars src/ correctly. Builds and seals it."""
    import subprocess

    from runner.config.loader import load_controls
    from runner.scaffold import scaffold
    from runner.sealing import seal_target

    scaffold(directory)
    built = subprocess.run(
        [sys.executable, "build_suite.py"], cwd=directory, capture_output=True, text=True
    )
    if built.returncode != 0:
        raise UserError(f"{directory}/build_suite.py failed: {built.stderr.strip()[-300:]}")
    controls = directory / "controls.yaml"
    digest, _ = seal_target(controls, load_controls, lambda line: err.print(line))
    err.print(f"wrote {directory}: suite sealed ({digest[:12]}); next:")
    for step in (
        f"deltarun validate {controls}",
        f"deltarun run {controls} --out runs/my-suite",
        "edit src/, then: python3 build_suite.py && deltarun seal controls.yaml",
    ):
        out.print(f"  {step}", highlight=False)


@app.command()
def validate(
    target: Annotated[Path, typer.Argument(help="A suite directory, tasks.jsonl or controls.yaml")],
    gold: Annotated[
        Path | None,
        typer.Option(
            "--gold", help="Directory of <task_id>.diff (default: the controls' patch arm 'gold')"
        ),
    ] = None,
    repeats: Annotated[
        int, typer.Option("-n", min=1, help="Runs of each side (3 finds flaky tests)")
    ] = 1,
    parallel: Annotated[int, typer.Option("-j", "--parallel", min=1, help="Trials at once")] = 2,
    broker: BrokerUrl = None,
    broker_file: BrokerFile = None,
    broker_ca: BrokerCa = None,
    broker_cert: BrokerCert = None,
    broker_key: BrokerKey = None,
    job_key_file: JobKeyFile = None,
) -> None:
    """Check every task before it becomes a number: the hidden test must fail on the bare
    fixture and pass with the gold patch, in the task's image and sandbox, n times each.
    The checks are a run (in .deltarun-validate/ beside tasks.jsonl; here, or on workers
    with --broker). Writes validation.json beside tasks.jsonl (seal the controls to pin
    it); exit 1 when any task is not valid."""
    where = _broker(broker, broker_file, broker_ca, broker_cert, broker_key)
    found = _validate(target, gold, repeats, parallel, where, job_key_file)
    if found.invalid:
        listed = ", ".join(f"{k} ({v.verdict})" for k, v in found.invalid.items())
        raise UserError(
            f"{len(found.invalid)} of {len(found.verdicts)} tasks are not valid: {listed}"
        )


def _validate(
    target: Path,
    gold: Path | None,
    repeats: int,
    parallel: int,
    broker: Broker | None,
    job_key_file: Path | None = None,
) -> Validation:
    """Plan, run and conclude a validation; print its table. (``validate``, ``import``.)"""
    from runner import validate_run
    from runner.run_service import RunService

    key = _job_key(job_key_file) if broker is not None else None
    with _Shown() as events:
        found = validate_run.validate(
            target, gold, repeats, RunService(events), parallel=parallel, broker=broker, job_key=key
        )
    width = max((len(t) for t in found.verdicts), default=4)
    for task_id, verdict in found.verdicts.items():
        out.print(f"{task_id:{width}}  {verdict.verdict:20}  {verdict.detail}", highlight=False)
    err.print(f"wrote {found.path} (sha256 {found.sha256})")
    return found


import_app = typer.Typer(
    no_args_is_help=True, help="Read suites written for other tools into deltarun suites."
)
app.add_typer(import_app, name="import")


@import_app.command("swebench")
def import_swebench(
    instances: Annotated[
        Path,
        typer.Argument(help="Instances: JSON Lines / JSON array, or a tasks/<id>/ layout folder"),
    ],
    repos: Annotated[
        Path,
        typer.Option("--repos", help="Local clones: DIR/<owner>__<name> or DIR/<owner>/<name>"),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="A new directory for the suite")],
    environment: Annotated[
        str | None, typer.Option("--environment", help="Every task in environments/NAME/")
    ] = None,
    dockerfile_template: Annotated[
        Path | None,
        typer.Option(
            "--dockerfile-template",
            help="Dockerfile of one environment per (repo, version); {{repo}} {{version}} "
            "{{base_commit}} are filled in, the files beside it are copied into each context",
        ),
    ] = None,
    predictions: Annotated[
        list[str] | None,
        typer.Option("--predictions", help="[NAME=]FILE: one patch arm per predictions file"),
    ] = None,
    control: Annotated[
        str | None,
        typer.Option("--control", help="The control arm: a predictions arm or 'empty'"),
    ] = None,
    with_hints: Annotated[
        bool, typer.Option("--with-hints", help="Append hints_text to the prompt")
    ] = False,
    negatives: Annotated[
        int, typer.Option("--negatives", min=0, help="Generated negative-control tasks to add")
    ] = 0,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1, help="Agent and verify limit, seconds")
    ] = 1800.0,
    validate_n: Annotated[
        int,
        typer.Option(
            "--validate", min=0, help="Validate N times each and exclude the invalid instances"
        ),
    ] = 0,
    parallel: Annotated[int, typer.Option("-j", "--parallel", min=1, help="Trials at once")] = 2,
) -> None:
    """SWE-bench instances and local clones into a suite of git-tree fixtures whose declared
    tests are FAIL_TO_PASS + PASS_TO_PASS; predictions files become patch arms. Seals it
    (or says to build its environments first); with --validate N, validates it and writes
    the instances that are not valid into suite.exclude."""
    from runner.swebench.importer import ImportOptions, arm_for, import_swebench

    options = ImportOptions(
        instances=instances,
        repos=repos,
        out=out_dir,
        environment=environment,
        dockerfile_template=dockerfile_template,
        with_hints=with_hints,
        negatives=negatives,
        predictions=tuple(arm_for(spec) for spec in predictions or []),
        control=control,
        timeout_s=timeout_s,
    )
    done = import_swebench(options, lambda line: err.print(line, highlight=False))
    controls = done.out / "controls.yaml"
    err.print(
        f"wrote {done.out}: {done.tasks} instances over {len(done.repositories)} repositories"
        f"{f', {done.negatives} negative controls' if done.negatives else ''}; arms "
        f"{', '.join(done.arms)} (control {done.control})",
        highlight=False,
    )
    for arm, count in done.resolved_by_arm.items():
        err.print(f"  {arm}: a patch for {count} of {done.tasks} instances", highlight=False)
    if done.environments:
        err.print(
            f"{len(done.environments)} environments to build first: "
            f"deltarun build {controls} (then run)",
            highlight=False,
        )
        return
    from runner.run_service import RunService
    from runner.swebench.workflow import seal_and_validate

    with _Shown() as events:
        seal_and_validate(
            controls, done.out / "gold", validate_n, RunService(events), events.note, parallel
        )
    out.print(f"next: deltarun run {controls} --out runs/{done.out.name}", highlight=False)


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

    from runner.status_sources import gather

    found = _broker(broker, broker_file, broker_ca, broker_cert, broker_key)
    for line in gather(run_dir, found.url if found is not None else None, time.time()):
        out.print(line, highlight=False, markup=False)


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="Run directory")]) -> None:
    """Score the ledger of a run and write report.md (for people), report.json (for
    programs: runner/schemas/report.schema.json) and report.html (one self-contained
    page with plots) into RUN_DIR, then print the headline."""
    from runner.report.build import write_report
    from runner.rundir import RunDir

    built, paths = write_report(RunDir(run_dir))
    _print_headline(built, paths)


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
    from runner.rundir import RunDir

    if controls is not None and not reverify:
        raise UsageError("--controls says where the suite is for --reverify; add --reverify")
    run = RunDir(run_dir)
    inputs = None
    if reverify:
        from runner.reverify import reverify_inputs

        inputs = reverify_inputs(run, controls)  # the suite found and checked before anything
    built = do_replay(run, accept_edits=accept_edits)
    _print_headline(built, [])
    state = "rebuilt, stamped as edited" if accept_edits else "identical"
    out.print(f"replay of {run_dir}: {state}", highlight=False)
    if reverify:
        from runner.reverify import reverify_run
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
    from runner.export import export_kit
    from runner.rundir import RunDir

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


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List, remove nothing")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Also those before their deadline")] = False,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache", help="Instead: empty this machine's cache ($DELTARUN_CACHE: blobs, git)"
        ),
    ] = False,
) -> None:
    """Remove deltarun containers and volumes left past their deadline."""
    if cache:
        from runner.cache import CacheDir

        store = CacheDir()
        if dry_run:
            entries = store.entries()
            size = sum(e.size for e in entries)
            out.print(f"would remove {len(entries)} entries ({size} bytes) from {store.root}")
            return
        count, size = store.clear()
        out.print(
            f"removed {count} cache entries ({size} bytes) from {store.root}", highlight=False
        )
        return
    from runner.sandbox.engine import connect
    from runner.sandbox.reaper import reap

    for line in reap(connect(), dry_run=dry_run, include_live=all_):
        out.print(line, highlight=False)


SCHEMAS = {
    "controls": "controls.yaml: suite pin, runtime, tools, arms",
    "task": "one line of tasks.jsonl (a repository task or an answer task)",
    "trial": "one record of trials.jsonl",
    "report": "report.json",
}


@app.command()
def schema(
    what: Annotated[
        str | None, typer.Argument(help="controls | task | trial | report; none lists them")
    ] = None,
) -> None:
    """Print the JSON Schema of a file format, for editors (no argument: list the formats)."""
    from pydantic import TypeAdapter

    from runner.config.model import Controls
    from runner.models import AnswerTask, RepoTask
    from runner.report.schema import ReportJSON

    models: dict[str, TypeAdapter[object]] = {
        "controls": TypeAdapter(Controls),
        "task": TypeAdapter(RepoTask | AnswerTask),
        "trial": TypeAdapter(Trial),
        "report": TypeAdapter(ReportJSON),
    }
    if what is None:
        for name, about in SCHEMAS.items():
            out.print(f"{name:9} {about}", highlight=False)
        out.print("print one: deltarun schema NAME", highlight=False)
        return
    if what not in models:
        raise UsageError(f"unknown schema {what!r}; choose one of {', '.join(models)}")
    out.print_json(json.dumps(models[what].json_schema(by_alias=True)))


def main() -> None:
    """Entry point: one line and an exit code for every deliberate error."""
    try:
        code = app(standalone_mode=False)
    except DeltarunError as exc:
        err.print(f"deltarun: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("deltarun: interrupted", highlight=False)
        sys.exit(130)
    except OSError as exc:  # a file or device problem the code did not foresee: still one line
        err.print(f"deltarun: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort as exc:
        err.print(f"deltarun: {exc}", highlight=False, markup=False)
        sys.exit(2)
    except Exception as exc:
        _click_exit(exc)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _click_exit(exc: Exception) -> None:
    """Exit for the command-line parser's own exceptions (click's, or the copy typer
    vendors): a usage error is one line and exit 2; returns for anything else."""
    for module in ("click.exceptions", "typer._click.exceptions"):
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        if isinstance(exc, found.UsageError):
            command = exc.ctx.command_path if exc.ctx is not None else "deltarun"
            err.print(
                f"deltarun: {exc.format_message()} (see `{command} --help`)",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            sys.exit(2)
        if isinstance(exc, found.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, found.Exit):
            sys.exit(exc.exit_code)


__all__ = ["UserError", "app", "main"]
