"""Commands about suites: seal, build, init, validate, import swebench, schema."""

from __future__ import annotations

import json
import sys
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
)
from runner.errors import UsageError, UserError
from runner.models import Trial

if TYPE_CHECKING:
    from runner.distributed.credentials import Broker
    from runner.run.validate import Validation


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
    from runner.suite.sealing import seal_target

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

    from runner.sandbox.engine import connect
    from runner.sandbox.image_build import BUILD_TIMEOUT_S, DockerImageBuilder
    from runner.suite.build import build as build_environments

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
def init(
    directory: Annotated[Path, typer.Argument(help="A new (or empty) directory for the suite")],
) -> None:
    """Write a minimal suite to start from: one repository task, one negative control, one
    answer task; controls with a no-op control, a gold patch arm and a command arm stub;
    build_suite.py (no make) that tars src/ correctly. Builds and seals it."""
    import subprocess

    from runner.config.loader import load_controls
    from runner.suite.scaffold import scaffold
    from runner.suite.sealing import seal_target

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
    where = broker_of(broker, broker_file, broker_ca, broker_cert, broker_key)
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
    from runner.run import validate as validate_run
    from runner.run.service import RunService

    key = job_key_of(job_key_file) if broker is not None else None
    with Shown() as events:
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
    from runner.run.service import RunService
    from runner.swebench.workflow import seal_and_validate

    with Shown() as events:
        seal_and_validate(
            controls, done.out / "gold", validate_n, RunService(events), events.note, parallel
        )
    out.print(f"next: deltarun run {controls} --out runs/{done.out.name}", highlight=False)


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
