"""Preparing a run: every check that must pass before the first sandbox starts, then the
run directory (new, or resumed under the same protocol hash) and the plan.

``STEPS`` names each check (``runner.run.plan_checks``) with the facts it needs and gives;
``runner.run.pipeline`` orders them by those needs, so "the metrics are checked on the
suite after exclusion" or "nothing is written before the preflight" is data a test reads.
Nothing here starts a container except the caller's ``preflight``.
"""

from __future__ import annotations

import platform
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from runner import __version__
from runner.agents.factory import agents_for, arm_members
from runner.agents.installed.arm_checks import check_installed
from runner.config.controls import Controls
from runner.config.loader import (
    LoadedControls,
    format_validation_error,
    load_controls,
    parse_controls,
)
from runner.errors import DigestMismatch, ProtocolMismatch, SuitePathError, UsageError, UserError
from runner.executors.contract import PreparedRun
from runner.grading import metrics as builtin_metrics
from runner.grading.metric_modules import load_metrics, read_module
from runner.grading.metrics import Metric
from runner.hashing import sha256_bytes
from runner.paths import is_forbidden
from runner.records import RepoTask, Task, grading_of
from runner.run import pipeline
from runner.run import plan_checks as checks
from runner.run.agent_images import Layered, artifact_pins, installed_arms, pin_agent_images
from runner.run.pipeline import Step, step
from runner.run.scoring_code import scoring_sha256
from runner.sandbox.host_limits import OverMachine
from runner.sandbox.python_version import matches
from runner.store.rundir import RunDir, RunMeta, TaskText, new_run_id, now_utc
from runner.suite.load import Suite, load_suite
from runner.suite.plan import plan_jobs
from runner.trial.sandbox_specs import image_of


def images_used(loaded: LoadedControls, suite: Suite) -> set[str]:
    return {image_of(task, loaded.controls) for task in suite.tasks}


@dataclass
class Draft:
    """What the preparation steps read and fill in, one fact at a time."""

    path: Path
    out: Path
    resume: bool
    image_digest: Callable[[str], str]
    preflight: Callable[[Controls, str], None] | None
    environ: Mapping[str, str] | None
    expect_protocol: str | None
    allow_missing: bool
    layer: Callable[[LoadedControls, Suite], Sequence[Layered]] | None
    python_of: Callable[[Controls, str], str] | None = None  # an image's Python (X.Y.Z)
    baseline_mode: str | None = None  # --baseline-mode: skill-on, skill-off or both
    root: Path | None = None  # what the controls' paths may name (``load_controls``)
    loaded: LoadedControls = field(init=False)
    authored: Controls = field(init=False)  # the controls before --baseline-mode
    suite: Suite = field(init=False)
    metrics: Mapping[str, Metric] = field(init=False)
    metrics_source: bytes | None = None
    used: set[str] = field(default_factory=set)
    digests: dict[str, str] = field(default_factory=dict)
    agent_artifacts: dict[str, dict[str, str]] = field(default_factory=dict)
    run_dir: RunDir = field(init=False)
    meta: RunMeta = field(init=False)

    @property
    def controls(self) -> Controls:
        return self.loaded.controls


def _controls(d: Draft) -> None:
    authored = load_controls(d.path, d.root)
    d.authored = authored.controls
    d.loaded = with_baseline_mode(authored, d.baseline_mode)
    check_installed(d.controls, str(d.path))
    checks.check_runtime(d.path, d.controls)


# --baseline-mode and the ``baseline:`` it gives every arm with toggles (seed 001).
BASELINE_MODES = {"skill-on": "on", "skill-off": "off", "both": "both"}
MODE_OF = {value: key for key, value in BASELINE_MODES.items()}


def with_baseline_mode(loaded: LoadedControls, mode: str | None) -> LoadedControls:
    """The controls as run: with ``--baseline-mode``, every arm with toggles gets that
    ``baseline:`` (so the protocol hash covers the mode: runs of two modes never share one).
    skill-off and both need an arm with toggles (one line otherwise)."""
    if mode is None:
        return loaded
    if mode not in BASELINE_MODES:
        raise UsageError(f"--baseline-mode {mode!r}: choose skill-on, skill-off or both")
    if mode != "skill-on" and all(arm.toggles is None for arm in loaded.controls.arms):
        raise UsageError(
            f"--baseline-mode {mode}: no arm of {loaded.path} has toggles (what its off leg "
            "turns off); give the arm toggles: {env: ..., prompt_suffix: ...}"
        )
    data = loaded.controls.model_dump(mode="json", by_alias=True)
    for arm in data["arms"]:
        if arm["toggles"] is not None:
            arm["baseline"] = BASELINE_MODES[mode]
    try:
        controls = Controls.model_validate(data)
    except ValidationError as exc:
        where = f"{loaded.path} with --baseline-mode {mode}"
        raise UserError(format_validation_error(where, exc)) from exc
    return LoadedControls(controls, loaded.path, loaded.agent_dir_digests, loaded.root)


def baseline_modes(controls: Controls) -> dict[str, str]:
    """Each arm with toggles and the mode it runs in (run.json's ``baseline_modes``)."""
    return {
        arm.name: MODE_OF[arm.baseline]
        for arm in controls.arms
        if arm.toggles is not None and arm.baseline is not None
    }


def controls_as_run(d: Draft) -> bytes:
    """What the run directory keeps as its controls.yaml: the file's bytes, or, when
    ``--baseline-mode`` changed an arm's ``baseline:``, the file with that change (comments
    dropped, a first line saying so), which parses to the controls run and hashes to the
    run's protocol: report, replay, export and reverify read the controls as run."""
    authored = d.path.read_bytes()
    if d.controls == d.authored:
        return authored
    data = yaml.safe_load(authored)
    for entry, arm in zip(data["arms"], d.controls.arms, strict=True):
        if arm.toggles is not None:
            entry["baseline"] = arm.baseline
    text = f"# {d.path.name} as run with --baseline-mode {d.baseline_mode}\n" + yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True
    )
    if parse_controls(text, str(d.path)) != d.controls:  # never expected: the YAML round trip
        raise UserError(f"{d.path}: cannot write the controls as run with --baseline-mode")
    return text.encode("utf-8")


def _suite(d: Draft) -> None:
    caps = d.controls.runtime.archive_caps
    d.suite = load_suite(d.loaded.suite_path, d.controls.suite.sha256 or None, caps)


def _validation(d: Draft) -> None:
    if d.controls.channel == "scored":
        checks.check_validation(d.path, d.controls, d.suite)


def _metrics(d: Draft) -> None:
    d.metrics_source, origin = read_module(d.loaded.metrics_path)
    d.metrics = load_metrics(d.controls.metrics, d.metrics_source, origin)
    checks.check_metrics(d.suite, d.metrics)


def _images(d: Draft) -> None:
    d.used = images_used(d.loaded, d.suite)
    d.digests = {image: d.image_digest(image) for image in sorted(d.used)}


def _pins(d: Draft) -> None:
    # An environment's image is pinned by the suite (environment_image), not under images:.
    checks.check_pins(d.path, d.controls, d.used - checks.environment_tags(d.suite), d.digests)


def _keys(d: Draft) -> None:
    if d.environ is not None:
        checks.check_keys(d.path, d.controls, d.environ)


def _preflight(d: Draft) -> None:
    if d.preflight is None:
        return
    for image in sorted(d.used):
        try:
            d.preflight(d.controls, image)  # limits and image checked before anything is written
        except OverMachine as exc:
            raise OverMachine(f"{d.path}: {exc}") from exc


def _python(d: Draft) -> None:
    """``runtime.python``: every image the run uses has that Python (exit 3 otherwise)."""
    pinned = d.controls.runtime.python
    if pinned is None or d.python_of is None:
        return
    for image in sorted(d.used):
        found = d.python_of(d.controls, image)
        if not matches(pinned, found):
            raise DigestMismatch(
                f"{d.path}: runtime.python pins {pinned}, image {image} "
                f"({d.digests.get(image, '?')[:19]}) has Python {found}; use an image of "
                f"Python {pinned}, or change the pin (a new protocol)"
            )


def _agent_images(d: Draft) -> None:
    """Installed agents run from their layer on each task image (built here when missing,
    by ``layer``), pinned by ID beside the task images."""
    layered = []
    if d.layer is not None and installed_arms(d.controls):
        layered = list(d.layer(d.loaded, d.suite))
    d.digests.update(pin_agent_images(d.controls, d.digests, d.image_digest))
    d.agent_artifacts = artifact_pins(d.controls, layered)


def _written(d: Draft) -> None:
    d.run_dir, d.meta = _run_dir(d)


# Each check and what it needs; ``runner.run.pipeline.order`` runs them in an order that
# respects every need (the declaration order only breaks ties). "suite kept" is the suite
# less suite.exclude: the validation pin is checked before it, everything per task after.
STEPS: list[Step[Draft]] = [
    step("controls", [], ["controls"], _controls),
    step(
        "expected protocol",
        ["controls"],
        ["protocol checked"],
        lambda d: checks.check_expected(d.path, d.loaded.protocol_sha256, d.expect_protocol),
    ),
    step("suite", ["controls"], ["suite"], _suite),
    step("validation pin", ["suite"], ["validation checked"], _validation),
    step(
        "exclusion",
        ["suite", "validation checked"],
        ["suite kept"],
        lambda d: setattr(d, "suite", checks.without_excluded(d.path, d.controls, d.suite)),
    ),
    step("metrics", ["suite kept"], ["metrics"], _metrics),
    step(
        "agent paths",
        ["controls"],
        ["agent paths checked"],
        lambda d: checks.check_agent_paths(d.path, d.loaded),
    ),
    step(
        "recorded outputs",
        ["suite kept"],
        ["recorded checked"],
        lambda d: checks.check_recorded(d.path, d.loaded, d.suite, d.allow_missing),
    ),
    step("image digests", ["suite kept"], ["task images"], _images),
    step("image pins", ["task images"], ["pins checked"], _pins),
    step("python pin", ["task images", "pins checked"], ["python checked"], _python),
    step(
        "environments",
        ["task images"],
        ["environments checked"],
        lambda d: checks.check_environments(d.suite, d.digests),
    ),
    step(
        "agent images",
        ["task images", "environments checked", "pins checked"],
        ["agent images"],
        _agent_images,
    ),
    step("keys", ["controls"], ["keys checked"], _keys),
    step(
        "preflight",
        ["task images", "pins checked", "environments checked", "keys checked"],
        ["preflighted"],
        _preflight,
    ),
    step(
        "run directory",
        [
            "protocol checked",
            "metrics",
            "agent paths checked",
            "recorded checked",
            "agent images",
            "preflighted",
            "python checked",
        ],
        ["run directory"],
        _written,
    ),
]
# Ordered once, on import: a need no step gives, a fact given twice or a circle fails here
# (and in tests/test_prepare_pipeline.py), never halfway through a run.
ORDERED = pipeline.order(STEPS)


def prepare(
    controls_path: Path,
    out: Path,
    *,
    resume: bool,
    image_digest: Callable[[str], str],
    preflight: Callable[[Controls, str], None] | None = None,
    environ: Mapping[str, str] | None = None,
    expect_protocol: str | None = None,
    allow_missing: bool = False,
    layer: Callable[[LoadedControls, Suite], Sequence[Layered]] | None = None,
    python_of: Callable[[Controls, str], str] | None = None,
    baseline_mode: str | None = None,
    root: Path | None = None,
) -> PreparedRun:
    """Check everything (``STEPS``) and plan the jobs still to run. ``environ`` is given when
    trials run here (their keys must be here too); ``preflight`` checks each image with the
    run's limits; ``expect_protocol`` is a pre-registered protocol hash the controls must
    still hash to; ``layer`` builds the installed agents' images when missing;
    ``baseline_mode`` (``--baseline-mode``) sets the mode of every arm with toggles; ``root``
    is what deltarun's own controls may name (``load_controls``). Nothing is written before
    every check passed."""
    d = Draft(
        controls_path, out, resume, image_digest, preflight, environ, expect_protocol,
        allow_missing, layer, python_of, baseline_mode, root,
    )  # fmt: skip
    for each in ORDERED:
        each.run(d)
    controls = d.controls
    jobs = plan_jobs(
        controls,
        d.suite.tasks,
        d.loaded.protocol_sha256,
        d.meta.run_id,
        random.Random(controls.runtime.seed),
    )
    recorded = d.run_dir.recorded_ids()
    members = {arm.name: arm_members(arm, d.loaded.base, d.loaded.root) for arm in controls.arms}
    return PreparedRun(
        loaded=d.loaded,
        suite=d.suite,
        run_dir=d.run_dir,
        meta=d.meta,
        jobs=jobs,
        todo=[job for job in jobs if job.job_id not in recorded],
        tasks={t.id: t for t in d.suite.tasks},
        agents=agents_for(controls, members),
        metrics=d.metrics,
        metrics_source=d.metrics_source,
    )


def _run_dir(d: Draft) -> tuple[RunDir, RunMeta]:
    """A new run directory, or the one resumed under the same mode and protocol hash."""
    out, controls, loaded = d.out, d.controls, d.loaded
    run_dir = RunDir(out)
    if run_dir.exists():
        if not d.resume:
            raise UserError(
                f"{out}: a run directory already exists; pass --resume to continue it "
                "or choose a new --out"
            )
        _check_modes(out, run_dir.meta().baseline_modes, baseline_modes(controls))
        meta = run_dir.check_protocol(loaded.protocol_sha256)
        run_dir.repair_torn_tail()
        if run_dir.task_texts() is None and meta.suite_sha256 == d.suite.sha256:
            run_dir.keep_task_texts(_task_texts(d.suite))  # recorded before the file existed
        return run_dir, meta
    if out.is_symlink():  # a new run directory is made, never written through a link
        raise SuitePathError(f"--out {out}: a symbolic link; choose a new --out directory")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out}: exists and is not a run directory; choose a new --out")
    exposed = _exposures(d.suite, controls.tools.forbidden_paths)
    meta = RunMeta(
        run_id=new_run_id(controls.protocol_id, now_utc()),
        protocol_id=controls.protocol_id,
        protocol_sha256=loaded.protocol_sha256,
        suite_sha256=d.suite.sha256,
        channel=controls.channel,
        control_arm=controls.control_arm,
        arms=[leg.name for leg in controls.legs()],
        tasks=[_task_meta(t, exposed.get(t.id)) for t in d.suite.tasks],
        image_digests=d.digests,
        agent_dir_digests=dict(sorted(loaded.agent_dir_digests.items())),
        agent_artifacts=d.agent_artifacts,
        created_at=now_utc().isoformat(),
        deltarun_version=__version__,
        python_version=platform.python_version(),
        controls_path=str(d.path.resolve()),
        builtin_metrics_sha256=sha256_bytes(Path(builtin_metrics.__file__).read_bytes()),
        scoring_sha256=scoring_sha256(),
        baseline_modes=baseline_modes(controls),
    )
    run_dir.create(meta, controls_as_run(d), _task_texts(d.suite))
    return run_dir, meta


def _check_modes(out: Path, recorded: dict[str, str] | None, asked: dict[str, str]) -> None:
    """A run directory is resumed in the modes it ran in (one line otherwise; run.json
    written before ``baseline_modes`` existed leaves it to the protocol hash)."""
    if recorded is None or recorded == asked:
        return

    def shown(modes: dict[str, str]) -> str:
        if not modes:
            return "no arm with toggles"
        if len(set(modes.values())) == 1:
            return f"--baseline-mode {next(iter(modes.values()))}"
        return ", ".join(f"{arm} {mode}" for arm, mode in sorted(modes.items()))

    again = shown(recorded) if recorded and len(set(recorded.values())) == 1 else "its modes"
    raise ProtocolMismatch(
        f"{out}: this run directory ran with {shown(recorded)}, this run asks for "
        f"{shown(asked)}; resume with {again}, or choose a new --out for a run of this mode"
    )


def _task_texts(suite: Suite) -> list[TaskText]:
    """The tasks' prompts and tags, kept in the run directory for the viewer: it shows them
    wherever the run directory goes, suite or no suite."""
    return [TaskText(t.id, t.prompt, tuple(t.tags)) for t in suite.tasks]


def _task_meta(task: Task, exposed: str | None) -> dict[str, str]:
    meta = {
        "id": task.id,
        "kind": task.kind.value,
        "size_bucket": task.size_bucket if isinstance(task, RepoTask) else "answer",
        "grading": grading_of(task).value,
    }
    if exposed is not None:
        meta["hidden_in_fixture"] = exposed
    return meta


def _exposures(suite: Suite, forbidden: Sequence[str]) -> dict[str, str]:
    """``hidden_in_fixture`` of every repository task with hidden files (comma-separated; empty
    when none): what ``load_suite`` found, less the forbidden paths, which never reach the
    agent."""
    return {
        task_id: ",".join(p for p in paths if not is_forbidden(p, forbidden))
        for task_id, paths in suite.exposed.items()
    }
