"""Commands about suites: seal, build, init, validate, import swebench / seed000 / seed004,
schema."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer import Argument, Option

from runner.cli import common as c
from runner.cli.common import Parallel, Target, app, err, out, say
from runner.cli.groups import takes_groups


@app.command()
def seal(
    target: Target,
    strip_top_folder: Annotated[
        bool,
        Option(
            "--strip-top-folder",
            help="Rewrite each tar fixture whose entries all sit under one folder without it",
        ),
    ] = False,
) -> None:
    """Check every task and archive, write their digests, print the suite digest."""
    from runner.suite.workflows import seal_steps

    say(seal_steps(target, strip_top_folder, c.tell))


# What a suite's build may reach and take (``deltarun build``).
BuildNetwork = Annotated[
    str,
    Option(
        "--network",
        help="Network of the build steps: none (a suite's build reaches nothing) or "
        "default (the engine's bridge, which also reaches this host's and its LAN's "
        "addresses): give it only to a suite you trust",
    ),
]
BuildMemory = Annotated[
    str | None,
    Option(
        "--memory",
        help="Memory of each build step, swap included, like 4g (default: half this "
        "machine's): a suite's build cannot take the memory the rest of the machine needs",
    ),
]
BuildPids = Annotated[
    int | None,
    Option(
        "--pids",
        min=16,
        help="Processes (threads included) each build step may run at once (default "
        "4096): a suite's build cannot fill this machine's process table",
    ),
]
BuildDisk = Annotated[
    str | None,
    Option(
        "--disk",
        help="What each environment's build may write to the engine's disk, its layers "
        "and the step running, like 40g (default 32g); past it the step running is "
        "killed and the build fails: a suite's build cannot fill this machine's disk",
    ),
]
BuildTimeout = Annotated[
    float | None,
    Option(
        "--timeout",
        min=1,
        help="Seconds each environment's build may take (default 3600); past them the "
        "step running is killed and the build fails",
    ),
]


@app.command()
def build(
    target: Target,
    rebuild: Annotated[
        bool, Option("--rebuild", help="Build again (no cache) even when the tag exists")
    ] = False,
    network: BuildNetwork = "none",
    memory: BuildMemory = None,
    pids: BuildPids = None,
    disk: BuildDisk = None,
    timeout: BuildTimeout = None,
    verbose: Annotated[
        bool, Option("-v", "--verbose", help="Stream the engine's build output")
    ] = False,
) -> None:
    """Build each environments/<name>/ the suite's tasks name, pin the images, and seal.

    Each image is built on the sandbox base (runtime.image of the controls, else
    deltarun/sandbox-python:bookworm) passed as --build-arg BASE, tagged
    deltarun-env/<name>:<context digest>, and checked against the sandbox contract. With
    controls of channel: scored, every other image the run uses is pinned under images:.
    """
    from runner.suite.workflows import BuildLimits, build_steps

    limits = BuildLimits(memory, timeout, pids, disk)
    steps = build_steps(target, rebuild, network, limits, verbose, err.is_terminal, c.Lines().note)
    say(steps, markup=False)
    if target.suffix in (".yaml", ".yml"):  # a scored run's images, pinned under images:
        from runner.run.image_pins import engine_image_ids, pin_run_images

        say(pin_run_images(target, engine_image_ids()), markup=False)
    if target.suffix in (".yaml", ".yml"):  # controls: its installed agents too
        from runner.run.agent_build import build_agents

        say(build_agents(target, c.Lines().note, limits.builder()), markup=False)


@app.command()
def init(
    directory: Annotated[Path, Argument(help="A new (or empty) directory for the suite")],
) -> None:
    """Write a minimal suite to start from: one repository task, one negative control, one
    answer task; controls with a no-op control, a gold patch arm and a command arm stub;
    build_suite.py (no make) that tars src/ correctly. Builds and seals it."""
    from runner.suite.workflows import init_steps

    say(init_steps(directory, c.tell))


@app.command()
@takes_groups
def validate(
    target: Target,
    gold: Annotated[
        Path | None,
        Option(
            "--gold", help="Directory of <task_id>.diff (default: the controls' patch arm 'gold')"
        ),
    ] = None,
    repeats: Annotated[
        int, Option("-n", min=1, help="Runs of each side (3 finds flaky tests)")
    ] = 1,
    parallel: Parallel = 2,
    *,
    broker: c.BrokerFlags,
    job_key_file: c.JobKeyFile = None,
) -> None:
    """Check every task before it becomes a number: the hidden test must fail on the bare
    fixture and pass with the gold patch, in the task's image and sandbox, n times each.
    The checks are a run (in .deltarun-validate/ beside tasks.jsonl; here, or on workers
    with --broker). Writes validation.json beside tasks.jsonl (seal the controls to pin
    it); exit 1 when any task is not valid."""
    from runner.run.service import RunService
    from runner.run.validate import validate as validate_suite

    found = broker.find()
    key = c.job_key_of(job_key_file) if found is not None else None
    with c.Shown() as events:
        service = RunService(events)
        done = validate_suite(
            target, gold, repeats, service, parallel=parallel, broker=found, job_key=key
        )
    say(done.table())
    c.tell(f"wrote {done.path} (sha256 {done.sha256})")
    done.require_valid()


DockerfileTemplate = Annotated[
    Path | None,
    Option(
        "--dockerfile-template",
        help="Dockerfile of one environment per (repo, version); {{repo}} {{version}} "
        "{{base_commit}} are filled in, the files beside it are copied into each context",
    ),
]
SuiteOut = Annotated[Path, Option("--out", help="A new directory for the suite")]
import_app = typer.Typer(
    no_args_is_help=True, help="Read suites written for other tools into deltarun suites."
)
app.add_typer(import_app, name="import")


@import_app.command("swebench")
def import_swebench(
    instances: Annotated[
        Path, Argument(help="Instances: JSON Lines / JSON array, or a tasks/<id>/ layout folder")
    ],
    out_dir: SuiteOut,
    repos: Annotated[
        Path | None,
        Option("--repos", help="Local clones: DIR/<owner>__<name> or DIR/<owner>/<name>"),
    ] = None,
    instance_image: Annotated[
        str | None,
        Option(
            "--instance-image",
            help="Each instance's image, instead of --repos: a reference template with "
            "{instance_id} {swebench_id} {repo} {version}, or 'swebench' / 'epoch' (their "
            "published layouts); pulled when absent, its repository taken out as the fixture, "
            "adapted by deltarun's layer and run as the task's sandbox",
        ),
    ] = None,
    instance_repo: Annotated[
        str, Option("--instance-repo", help="The repository's path in the instance images")
    ] = "/testbed",
    instance_tree: Annotated[
        str,
        Option(
            "--instance-tree",
            help="The fixture from an instance image: commit (its git tree at base_commit) or "
            "image (the repository as the image has it: untracked and built files too)",
        ),
    ] = "commit",
    environment: Annotated[
        str | None, Option("--environment", help="Every task in environments/NAME/")
    ] = None,
    dockerfile_template: DockerfileTemplate = None,
    specs: Annotated[
        Path | None,
        Option(
            "--specs",
            help="Per-repository specs (SWE-bench's {repo: {version: {install, pip_packages, "
            "python, env_vars, test_cmd, pre_install}}}), YAML or JSON",
        ),
    ] = None,
    predictions: Annotated[
        list[str] | None,
        Option("--predictions", help="[NAME=]FILE: one patch arm per predictions file"),
    ] = None,
    control: Annotated[
        str | None, Option("--control", help="The control arm: a predictions arm or 'no-change'")
    ] = None,
    with_hints: Annotated[
        bool, Option("--with-hints", help="Append hints_text to the prompt")
    ] = False,
    negatives: Annotated[
        int, Option("--negatives", min=0, help="Generated negative-control tasks to add")
    ] = 0,
    timeout_s: Annotated[
        float, Option("--timeout", min=1, help="Agent and verify limit, seconds")
    ] = 1800.0,
    validate_n: Annotated[
        int,
        Option("--validate", min=0, help="Validate N times each and exclude the invalid instances"),
    ] = 0,
    parallel: Parallel = 2,
) -> None:
    """SWE-bench instances and local clones into a suite of git-tree fixtures whose declared
    tests are FAIL_TO_PASS + PASS_TO_PASS; predictions files become patch arms. Seals it
    (or says to build its environments first); with --validate N, validates it and writes
    the instances that are not valid into suite.exclude.
    \f
    Longer than the house's ~60 lines on purpose: one declaration per command-line option
    (after the form feed: not in ``--help``)."""
    from runner.run.service import RunService
    from runner.swebench.importer import ImportOptions, arm_for
    from runner.swebench.workflow import import_suite

    options = ImportOptions(
        instances=instances,
        repos=repos,
        out=out_dir,
        environment=environment,
        dockerfile_template=dockerfile_template,
        specs=specs,
        with_hints=with_hints,
        negatives=negatives,
        predictions=tuple(arm_for(spec) for spec in predictions or []),
        control=control,
        timeout_s=timeout_s,
        instance_image=instance_image,
        instance_repo=instance_repo,
        instance_tree=instance_tree,
    )
    with c.Shown() as events:
        steps = import_suite(options, validate_n, parallel, RunService(events), c.tell)
    say(steps)


SeedArms = Annotated[
    list[str] | None,
    Option(
        "--arm",
        help="NAME=DIR: a patch arm replaying DIR's <task_id>.diff / .abstain / .answer.json "
        "(copied into the suite's arms/NAME/)",
    ),
]
SeedCommands = Annotated[
    list[str] | None,
    Option("--command", help="NAME=ARGV: the --arm NAME is a command arm running ARGV"),
]
SeedImage = Annotated[str, Option("--image", help="The sandbox image (runtime.image)")]


@import_app.command("seed000")
def import_seed000(
    protocol: Annotated[Path, Argument(help="The seed-000 protocol YAML (eval_protocol.yaml)")],
    out_dir: SuiteOut,
    tasks: Annotated[
        Path | None, Argument(help="Its tasks (JSON Lines); default the protocol's dataset.path")
    ] = None,
    arms: SeedArms = None,
    commands: SeedCommands = None,
    image: SeedImage = "deltarun/sandbox-python:bookworm",
) -> None:
    """A seed-000 protocol YAML and its answer tasks into a sealed suite: dataset.sha256
    checked, metrics as deltarun's built-ins, control.name the control arm, runtime.python
    checked in the image, which is pinned by ID. Each seed field that cannot map is one line
    (docs/seed-formats.md)."""
    from runner.seedkits.seed_import import ImportRequest
    from runner.seedkits.seed_import import import_seed000 as run_import

    request = ImportRequest(out_dir, tuple(arms or ()), tuple(commands or ()), image)
    say(run_import(protocol, tasks, request, c.tell))


@import_app.command("seed004")
def import_seed004(
    kit: Annotated[
        Path, Argument(help="The seed-004 kit folder: tasks.jsonl, metrics.py, controls.yaml")
    ],
    out_dir: SuiteOut,
    arms: SeedArms = None,
    commands: SeedCommands = None,
    control: Annotated[
        str | None, Option("--control", help="The control arm (default: a scripted no-op)")
    ] = None,
    image: SeedImage = "deltarun/sandbox-python:bookworm",
) -> None:
    """A seed-004 replay kit into a sealed suite: suite_sha256 checked, each hidden test
    moved out of its fixture into the hidden tar, pytest commands as declared tests, the
    model endpoint as an openai arm. Each seed field that cannot map is one line
    (docs/seed-formats.md)."""
    from runner.seedkits.seed_import import ImportRequest
    from runner.seedkits.seed_import import import_seed004 as run_import

    request = ImportRequest(out_dir, tuple(arms or ()), tuple(commands or ()), image, control)
    say(run_import(kit, request, c.tell))


@app.command()
def schema(
    what: Annotated[
        str | None, Argument(help="controls | task | trial | report | trajectory; none lists them")
    ] = None,
) -> None:
    """Print the JSON Schema of a file format, for editors (no argument: list the formats)."""
    from runner.cli.schemas import json_schema, listing

    if what is None:
        say(listing())
    else:
        out.print_json(json_schema(what))
