"""The run service: one object that carries a run from its controls to its last record.

``deltarun run``, ``deltarun validate``, ``deltarun import swebench --validate`` and
the benchmarks all go through ``RunService``:

1. ``prepare`` (``runner.run.prepare``): every check before the first sandbox, and the
   plan; a local run's start-up sandbox (``Preflight``);
2. ``executor``: the local pool (``runner.executors.local``), after reaping what a killed
   run on this host left; or Celery on Redis (``runner.distributed.coordinator``), after pushing
   the run's images to a registry when asked;
3. ``execute``: the executor runs the jobs still to do and hands back each batch;
   ``Recording`` (``runner.run.recording``) appends the first record of each job to the run
   directory (later
   ones are kept aside as duplicates, never counted) and applies the stop rule;
   an ``Events`` listener (``runner.run.events``) hears of each record and setup warning.
   With ``--until-decided`` the jobs run block by block (``runner.suite.plan``), each
   block followed by a look (``runner.run.looks_file``); the run stops once the looks
   decide every delta criterion of the gate.

Then the caller writes the report. The CLI only parses arguments, draws
``Events`` and maps errors to exit codes; the benchmark of the Celery path
(``bench/dispatch.py``) runs through here too, naming its own trial task.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.agents.installed.arm_checks import check_installed
from runner.agents.installed.layer import AgentImages
from runner.config.controls import Controls
from runner.config.loader import LoadedControls, load_controls
from runner.errors import RunInterrupted, UsageError, UserError
from runner.executors.contract import Executor, Interrupted, PreparedRun, RecordBatch
from runner.executors.local import LocalExecutor, local_runner
from runner.records import Trial
from runner.run.agent_images import Layered, ensure, installed_arms
from runner.run.events import Events, Notes, Quiet
from runner.run.looks_file import stop_line, write_looks
from runner.run.plan_checks import command_names
from runner.run.prepare import prepare
from runner.run.recording import BudgetReached, Recording
from runner.run.retry import Retry, check_retry, forget_done, plan_retry
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.engine import connect, image_id
from runner.sandbox.image_build import BUILD_TIMEOUT_S, DockerImageBuilder
from runner.sandbox.python_version import python_version
from runner.sandbox.reaper import reap
from runner.store.setup_warnings import first_sign
from runner.suite.load import Suite, load_suite
from runner.suite.plan import task_blocks
from runner.trial.sandbox_specs import preflight_spec

if TYPE_CHECKING:
    from docker import APIClient

    from runner.distributed.credentials import Broker, BrokerOptions


class Engine:
    """The Docker engine, connected on first use: digests are checked before Docker."""

    def __init__(self, client: APIClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> APIClient:

        if self._client is None:
            self._client = connect()
        return self._client

    def image_digest(self, image: str) -> str:

        return image_id(self.client, image)


@dataclass(frozen=True)
class RunOptions:
    """How to run, besides the controls: where, how many at once, over which broker."""

    out_dir: Path
    parallel: int = 2
    resume: bool = False
    broker: Broker | None = None  # None: the local pool
    job_key: bytes | None = None  # needed with a broker (``job_key``)
    visibility_timeout_s: int = 7200
    expect_protocol: str | None = None
    registry: str | None = None  # HOST:PORT the run's images are pushed to (broker only)
    allow_missing: bool = False
    setup_flags: bool = True  # tell the first record of each kind of setup warning
    task_name: str | None = None  # the Celery task of the jobs; None: the workers' trial task
    baseline_mode: str | None = None  # skill-on | skill-off | both; None: the controls' own
    # Without --registry: warn when the run's archives in Redis exceed this (--blob-warn)
    blob_warn_bytes: int = 256 << 20
    # What the paths of deltarun's own controls may name (validate's: the suite and its
    # gold); None: the controls' folder, as for any controls a user gives
    root: Path | None = None
    until_decided: bool = False  # block by block, stopping once the gate is decided
    retry_errors: bool = False  # run again the jobs recorded as errors (runner.run.retry)


def plan_line(prepared: PreparedRun, options: RunOptions, retry: Retry | None = None) -> str:
    """What a run is about to do: its jobs (recorded, to run), where, and its digests."""
    meta, found = prepared.meta, options.broker
    total, todo = len(prepared.jobs), len(prepared.todo)
    where = f"broker {found.shown} ({found.source})" if found else f"-j {options.parallel}"
    plan = f"{total - todo} recorded, {todo} to run"
    if retry is not None:
        again = len(retry.attempts)
        plan = f"{total - retry.unrecorded} recorded, {again} errors to run again"
        plan += f", {retry.unrecorded} to run" if retry.unrecorded else ""
    return (
        f"run {meta.run_id}: {total} jobs ({plan}), "
        f"{where}, protocol {meta.protocol_sha256[:12]}, suite {meta.suite_sha256[:12]}"
    )


def find_broker(
    options: BrokerOptions, environ: Mapping[str, str], events: Notes, required: bool = False
) -> Broker | None:
    """The broker the options (or $DELTARUN_BROKER_URL) name, reached once (one line and
    exit 1 before anything is written when it is wrong), or None."""
    from runner.distributed.credentials import resolve_broker

    found = resolve_broker(options, environ)
    if found is None:
        if required:
            raise UsageError(
                "no broker: give --broker-file FILE (its first line the Redis URL), "
                "--broker URL, or set $DELTARUN_BROKER_URL"
            )
        return None
    for warning in found.warnings:
        events.note(f"deltarun: warning: {warning}")
    from runner.distributed.connection import connect_redis  # redis: a broker's runs only

    connect_redis(found.url)
    return found


def job_key(option: Path | None, environ: Mapping[str, str], events: Notes) -> bytes:
    """The key that signs jobs and records (``runner.distributed.credentials``)."""
    from runner.distributed.credentials import load_job_key

    loaded = load_job_key(option, environ)
    if loaded.created:
        events.note(
            f"job key: made {loaded.source} (0600); a worker on another machine needs a copy"
        )
    return loaded.key


class RunService:
    """One run: ``prepare``, then ``execute``; ``run`` does both."""

    def __init__(self, events: Events | None = None, engine: Engine | None = None) -> None:
        self.events: Events = events or Quiet()
        self.engine = engine or Engine()

    def run(self, controls: Path, options: RunOptions) -> PreparedRun:
        """Prepare, note the plan (``plan_line``) and execute; the run directory then holds
        every record (or the error)."""
        self.check_registry(options)
        self.check_until_decided(controls, options)
        if options.retry_errors:
            check_retry(controls, options.out_dir, options.until_decided, options.root)
        prepared = self.prepare(controls, options)
        retry = None
        if options.retry_errors:
            retry = plan_retry(prepared, options.resume)
            prepared = replace(prepared, todo=retry.todo)
            for line in retry.notes():
                self.events.note(line)
        self.events.note(plan_line(prepared, options, retry))
        self.execute(prepared, options, retry)
        return prepared

    @staticmethod
    def check_registry(options: RunOptions) -> None:
        """A registry needs a broker (workers pull from it), and must answer."""
        if options.registry is None:
            return
        if options.broker is None:
            raise UsageError("--registry ships images to workers: it needs --broker")
        from runner.distributed import registry as registries

        registries.check(options.registry)

    @staticmethod
    def check_until_decided(controls: Path, options: RunOptions) -> None:
        """``--until-decided`` runs on controls whose gate has a ``sequential:`` block (one
        line otherwise, before anything is written), on the local pool or through a broker:
        either executor is handed one block's jobs at a time (``_blocks``)."""
        if not options.until_decided:
            return
        gate = load_controls(controls, root=options.root).controls.gate
        if gate is None or gate.sequential is None or not gate.delta_targets():
            raise UsageError(
                f"{controls}: --until-decided needs a gate: section with a delta criterion "
                "(superiority, non_inferiority, ...) and a sequential: block (docs/ci.md)"
            )

    def prepare(self, controls: Path, options: RunOptions) -> PreparedRun:
        """Every check before the first sandbox; trials that run here are preflighted here
        (workers check their own)."""

        local = options.broker is None
        return prepare(
            controls,
            options.out_dir,
            resume=options.resume or options.retry_errors,
            image_digest=self.engine.image_digest,
            preflight=self._preflight(controls) if local else None,
            environ=os.environ if local else None,
            expect_protocol=options.expect_protocol,
            allow_missing=options.allow_missing,
            layer=self.layer,
            python_of=self._python_of,
            baseline_mode=options.baseline_mode,
            root=options.root,
        )

    def layer_agents(
        self,
        controls: Path,
        say: Callable[[str], None] | None = None,
        builder: DockerImageBuilder | None = None,
    ) -> list[Layered]:
        """Fetch and layer every installed agent onto the task images it runs on, when
        missing (with progress, with ``builder`` when given); a pinned
        ``artifacts_sha256`` must match (exit 3)."""

        loaded = load_controls(controls)
        if not installed_arms(loaded.controls):
            return []
        check_installed(loaded.controls, str(controls))
        caps = loaded.controls.runtime.archive_caps
        suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256 or None, caps)
        return self.layer(loaded, suite, say, builder)

    def layer(
        self,
        loaded: LoadedControls,
        suite: Suite,
        say: Callable[[str], None] | None = None,
        builder: DockerImageBuilder | None = None,
    ) -> list[Layered]:
        """``layer_agents`` on controls and a suite already loaded (``prepare``'s step)."""

        builder = builder or DockerImageBuilder(connect(BUILD_TIMEOUT_S))
        return ensure(loaded, suite, AgentImages(builder, builder, say or self.events.note))

    def _python_of(self, controls: Controls, image: str) -> str:
        """The Python of ``image`` on this engine (``runtime.python``), asked once per run."""

        spec = replace(preflight_spec(controls, image), model_access=None)  # no gateway needed
        return python_version(DockerSandboxFactory(self.engine.client), spec)

    def _preflight(self, path: Path) -> Preflight:
        return Preflight(path, self.engine)

    def executor(self, prepared: PreparedRun, options: RunOptions) -> Executor:
        """Celery on Redis with a broker (images pushed to ``registry`` first), else the
        local pool, after reaping what a killed run on this host left."""
        if options.broker is not None:
            return self._celery(prepared, options)

        for line in reap(self.engine.client, dry_run=False, past_deadline=False):
            if line != "nothing to remove":
                self.events.note(f"reaper: {line}")
        factory = DockerSandboxFactory(self.engine.client, worker=socket.gethostname())
        return LocalExecutor(
            local_runner(prepared, factory, factory.worker), options.parallel, factory.kill_all
        )

    def _celery(self, prepared: PreparedRun, options: RunOptions) -> Executor:
        from runner.distributed import registry as registries
        from runner.distributed.coordinator import CeleryExecutor
        from runner.distributed.keys import TRIAL_TASK

        assert options.broker is not None
        if options.job_key is None:
            raise UsageError("a run over a broker needs the job key")
        images = None
        if options.registry is not None:  # each image the run pins, pushed once, by its ID
            images = registries.push_all(
                self.engine.client,
                prepared.meta.image_digests,
                options.registry,
                lambda line: self.events.note(f"registry: {line}"),
            )
        return CeleryExecutor(
            options.broker.url,
            options.visibility_timeout_s,
            lambda line: self.events.note(f"deltarun: warning: {line}"),
            images,
            job_key=options.job_key,
            task_name=options.task_name or TRIAL_TASK,
            blob_registry=options.registry,
            blob_warn_bytes=options.blob_warn_bytes,
        )

    def execute(
        self, prepared: PreparedRun, options: RunOptions, retry: Retry | None = None
    ) -> Recording:
        """Run the jobs still to do, recording each batch; ``RunInterrupted`` on Ctrl-C,
        with what was recorded kept. With ``retry``, the error records its jobs supersede
        are counted no more (``Recording.retrying``), and a broker's workers are let run
        those jobs again (``forget_done``)."""

        executor = self.executor(prepared, options)
        total = len(prepared.jobs)
        recording = Recording(prepared, retrying=dict(retry.attempts) if retry else {})
        if retry is not None and options.broker is not None:
            forget_done(options.broker.url, prepared.meta.run_id, list(retry.attempts))
        flagged: set[str] = set()
        events = self.events

        def on_trial(trial: Trial) -> None:
            events.recorded(trial, recording, total)
            sign = first_sign(prepared.loaded.controls, trial) if options.setup_flags else None
            if sign is not None and sign[0] not in flagged:
                flagged.add(sign[0])  # once per kind (and arm); the report lists them all
                events.setup_warning(sign[1])

        recording.on_trial = on_trial
        events.started(prepared, recording, total)
        try:
            if options.until_decided:
                self._blocks(prepared, executor, recording.batch)
            else:
                executor.run(prepared, recording.batch)
        except BudgetReached as reached:
            events.note(
                f"run budget ${reached.args[0]:.2f} reached after {recording.recorded}/{total} "
                "jobs: no further trial started (the report says so)"
            )
        except Interrupted:
            raise RunInterrupted(
                f"interrupted: {recording.recorded}/{total} jobs recorded in "
                f"{prepared.run_dir.ledger_path}; continue with --resume"
            ) from None
        finally:
            if options.until_decided:
                write_looks(prepared.run_dir)
        return recording

    def _blocks(self, prepared: PreparedRun, executor: Executor, record: RecordBatch) -> None:
        """Each block's jobs still to do, then a look (``runner.run.looks_file``), until the
        looks decide every delta criterion or the suite is spent; a resumed run takes its
        looks again from the ledger first."""
        run_dir = prepared.run_dir
        cut = task_blocks(prepared.loaded.controls, [t["id"] for t in prepared.meta.tasks])
        todo = {job.job_id for job in prepared.todo}
        for block in cut or []:
            found = write_looks(run_dir)
            if found is not None and found.decided:
                break
            tasks = set(block)
            jobs = [job for job in prepared.jobs if job.task_id in tasks and job.job_id in todo]
            if jobs:
                executor.run(replace(prepared, todo=jobs), record)
        found = write_looks(run_dir)
        if found is not None:
            self.events.note(stop_line(found))


class Preflight:
    """The start-up sandbox of a local run: the run's limits and image work, and each
    command arm's program is on the image's PATH (one line naming the arm otherwise)."""

    def __init__(self, path: Path, engine: Engine) -> None:
        self.path = path
        self.engine = engine

    def __call__(self, controls: Controls, image: str) -> None:

        names = command_names(controls)
        factory = DockerSandboxFactory(self.engine.client)
        missing = factory.preflight(preflight_spec(controls, image), sorted(names))
        if missing:
            raise UserError(
                f"{self.path}: {names[missing[0]]}: agent.argv[0] {missing[0]!r} is not a "
                f"command in image {image!r} (PATH /usr/local/bin:/usr/bin:/bin); give a "
                "path under /opt/agent (the arm's directory) or a program the image has"
            )
