"""Preparing a run: every check that must pass before the first sandbox starts.

Order: controls parse → suite digests (exit 3 on any mismatch) → images present
→ scored-channel pins → run directory (new, or resumed under the same protocol
hash) → the plan. Nothing here starts a container.
"""

from __future__ import annotations

import json
import platform
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from runner import __version__
from runner.agents.base import Agent
from runner.agents.factory import agent_members, agents_for
from runner.config.loader import (
    LoadedControls,
    load_controls,
    missing_api_keys,
    scored_channel_problems,
)
from runner.config.model import CommandAgent, Controls, PatchAgent
from runner.errors import DigestMismatch, ProtocolMismatch, UserError
from runner.grading import metrics as builtin_metrics
from runner.grading.metric_modules import load_metrics, read_module
from runner.grading.metrics import Metric
from runner.grading.validation import FINE
from runner.hashing import sha256_bytes
from runner.models import AnswerTask, Job, RepoTask, Task, grading_of
from runner.paths import is_forbidden
from runner.run.rundir import RunDir, RunMeta, new_run_id, now_utc
from runner.sandbox.base import AGENT_DIR
from runner.suite.load import Suite, load_suite
from runner.suite.plan import plan_jobs
from runner.suite.sealing import VALIDATION_NAME
from runner.trial.execute import image_of


@dataclass
class PreparedRun:
    loaded: LoadedControls
    suite: Suite
    run_dir: RunDir
    meta: RunMeta
    jobs: list[Job]
    todo: list[Job]
    tasks: dict[str, Task]
    agents: dict[str, Agent]
    metrics: Mapping[str, Metric]
    metrics_source: bytes | None


def images_used(loaded: LoadedControls, suite: Suite) -> set[str]:
    return {image_of(task, loaded.controls) for task in suite.tasks}


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
) -> PreparedRun:
    """Check everything and plan the jobs still to run. ``environ`` is given when trials run
    here (their keys must be here too); ``preflight`` checks each image with the run's limits;
    ``expect_protocol`` is a pre-registered protocol hash the controls must still hash to."""
    loaded = load_controls(controls_path)
    controls = loaded.controls
    _check_expected(controls_path, loaded.protocol_sha256, expect_protocol)
    suite = load_suite(
        loaded.suite_path, controls.suite.sha256 or None, controls.runtime.archive_caps
    )
    if controls.channel == "scored":
        _check_validation(controls_path, controls, suite)
    suite = _without_excluded(controls_path, controls, suite)
    metrics_source, metrics_origin = read_module(loaded.base, controls.metrics)
    metrics = load_metrics(controls.metrics, metrics_source, metrics_origin)
    _check_metrics(suite, metrics)
    _check_agent_paths(controls_path, loaded)
    _check_recorded(controls_path, loaded, suite, allow_missing)
    used = images_used(loaded, suite)
    digests = {image: image_digest(image) for image in sorted(used)}
    # An environment's image is pinned by the suite (environment_image), not under images:.
    _check_pins(controls_path, controls, used - _environment_tags(suite), digests)
    _check_environments(suite, digests)
    if environ is not None:
        _check_keys(controls_path, controls, environ)
    if preflight is not None:
        for image in sorted(used):
            preflight(controls, image)  # limits and image checked before anything is written
    run_dir, meta = _run_dir(controls_path, out, resume, loaded, suite, digests)
    jobs = plan_jobs(
        controls,
        suite.tasks,
        loaded.protocol_sha256,
        meta.run_id,
        random.Random(controls.runtime.seed),
    )
    recorded = run_dir.recorded_ids()
    members = {arm.name: agent_members(arm.agent, loaded.base) for arm in controls.arms}
    return PreparedRun(
        loaded=loaded,
        suite=suite,
        run_dir=run_dir,
        meta=meta,
        jobs=jobs,
        todo=[job for job in jobs if job.job_id not in recorded],
        tasks={t.id: t for t in suite.tasks},
        agents=agents_for(controls, members),
        metrics=metrics,
        metrics_source=metrics_source,
    )


def _check_expected(path: Path, actual: str, expected: str | None) -> None:
    """A pre-registered protocol cannot be edited silently: exit 3 on any other hash."""
    if expected is None:
        return
    wanted = expected.strip().lower()
    if not 12 <= len(wanted) <= 64 or any(ch not in "0123456789abcdef" for ch in wanted):
        raise UserError(
            f"--expect-protocol: {expected!r} is not a protocol hash; give the 64 hex digits "
            "(or at least the first 12) that run.json and the report's pins show"
        )
    if not actual.startswith(wanted):
        raise ProtocolMismatch(
            f"{path}: hashes to protocol {actual}, not the expected {wanted}; the controls "
            "(or an agent directory) changed since the protocol was registered"
        )


def _without_excluded(path: Path, controls: Controls, suite: Suite) -> Suite:
    """The suite less ``suite.exclude``'s tasks (each must be one of the suite's)."""
    excluded = set(controls.suite.exclude or ())
    unknown = sorted(excluded - {t.id for t in suite.tasks})
    if unknown:
        raise UserError(
            f"{path}: suite.exclude: {unknown[0]!r} is not a task of {suite.path}; remove it"
        )
    if not excluded:
        return suite
    kept = tuple(t for t in suite.tasks if t.id not in excluded)
    return replace(
        suite, tasks=kept, exposed={k: v for k, v in suite.exposed.items() if k not in excluded}
    )


def _check_validation(path: Path, controls: Controls, suite: Suite) -> None:
    """channel scored: the suite's validation.json is pinned, unchanged, of this suite
    digest, and every task is valid (or answer-only) unless ``suite.exclude`` lists it."""
    pinned = controls.suite.validation
    found = suite.root / VALIDATION_NAME
    if pinned is None:
        raise UserError(
            f"{path}: channel scored needs a validated suite: run `deltarun validate {path}`, "
            f"then `deltarun seal {path}` (it pins {VALIDATION_NAME} as suite.validation)"
        )
    try:
        digest = sha256_bytes(found.read_bytes())
    except OSError as exc:
        raise UserError(f"{found}: cannot read the pinned validation ({exc})") from exc
    if digest != pinned:
        raise DigestMismatch(
            f"{found}: digest mismatch: controls pin {pinned}, file has {digest}; restore it "
            "or validate again and seal the controls"
        )
    try:
        data = json.loads(found.read_bytes())
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise UserError(f"{found}: not a validation deltarun wrote; run deltarun validate again")
    if data.get("suite_sha256") != suite.sha256:
        raise UserError(
            f"{found}: validated suite {str(data.get('suite_sha256'))[:12]}, the run's is "
            f"{suite.sha256[:12]}; validate again and seal the controls"
        )
    excluded = set(controls.suite.exclude or ())
    bad = [
        f"{t['id']} ({t['verdict']})"
        for t in data["tasks"]
        if isinstance(t, dict) and t.get("verdict") not in FINE and t.get("id") not in excluded
    ]
    if bad:
        raise UserError(
            f"{path}: channel scored: {len(bad)} task(s) not valid: {', '.join(bad[:5])}; fix "
            "them and validate again, or list them under suite.exclude"
        )


def _check_metrics(suite: Suite, metrics: Mapping[str, Metric]) -> None:
    for number, task in enumerate(suite.tasks, start=1):
        if isinstance(task, AnswerTask):
            unknown = [name for name in task.metrics if name not in metrics]
            if unknown:
                raise UserError(
                    f"{suite.path}:{number}: metrics: {unknown[0]!r} is neither built in nor "
                    "listed under metrics.functions in controls"
                )


def _check_pins(path: Path, controls: Controls, used: set[str], digests: Mapping[str, str]) -> None:
    """Pinned images must match the local ones; the scored channel needs every pin."""
    for image, pinned in controls.images.items():
        if image in digests and digests[image] != pinned:
            raise DigestMismatch(
                f"{path}: images.{image}: pinned {pinned}, the local image is "
                f"{digests[image]}; rebuild the pinned image or update the pin"
            )
    if controls.channel == "scored":
        problems = scored_channel_problems(controls, used, dict(digests))
        if problems:
            raise UserError(f"{path}: channel scored refuses to start: {problems[0]}")


def _environment_tags(suite: Suite) -> set[str]:
    return {
        t.environment_tag
        for t in suite.tasks
        if isinstance(t, RepoTask) and t.environment_tag is not None and t.environment_image
    }


def _check_environments(suite: Suite, digests: Mapping[str, str]) -> None:
    """An environment image must be the very image `deltarun build` pinned in the suite."""
    for task in suite.tasks:
        if isinstance(task, RepoTask) and task.environment_tag is not None:
            have = digests.get(task.environment_tag)
            if task.environment_image and have != task.environment_image:
                raise DigestMismatch(
                    f"{suite.path}: task {task.id!r}: environment {task.environment!r}: the suite "
                    f"pins image {task.environment_image}, the local {task.environment_tag} is "
                    f"{have}; restore the pinned image (docker pull or load it), or rebuild "
                    "with `deltarun build` (a new pin)"
                )


def _check_agent_paths(path: Path, loaded: LoadedControls) -> None:
    """A command arm's argv names files of its directory (under /opt/agent) that exist:
    a wrong path would make every trial a miss with exit 127, scored as the agent's."""
    for index, arm in enumerate(loaded.controls.arms):
        if not isinstance(arm.agent, CommandAgent):
            continue
        members = agent_members(arm.agent, loaded.base) or []
        files = {m.path for m in members if not m.is_dir}
        for position, word in enumerate(arm.agent.argv):
            if not word.startswith(AGENT_DIR + "/"):
                continue
            relative = word[len(AGENT_DIR) + 1 :]
            if relative not in files:
                raise UserError(
                    f"{path}: arms[{index}] ({arm.name}): agent.argv[{position}] {word} is not "
                    f"in its directory {arm.agent.dir} (copied to {AGENT_DIR}); fix the path "
                    "or add the file"
                )


RECORDED = (".diff", ".abstain", ".answer.json")


def _check_recorded(path: Path, loaded: LoadedControls, suite: Suite, allow: bool) -> None:
    """A patch arm's recorded answers are JSON, and it has a recorded output for every task
    (``--allow-missing``: a missing one counts as an empty answer, and the report's setup
    warnings name it)."""
    for index, arm in enumerate(loaded.controls.arms):
        if not isinstance(arm.agent, PatchAgent):
            continue
        members = [m for m in agent_members(arm.agent, loaded.base) or [] if not m.is_dir]
        for member in members:
            if member.path.endswith(".answer.json"):
                try:
                    json.loads(member.data)
                except ValueError as exc:
                    raise UserError(
                        f"{path}: arms[{index}] ({arm.name}): {arm.agent.dir}/{member.path} is "
                        f"not JSON ({exc}); fix it (an answer is one JSON value)"
                    ) from exc
        if allow:
            continue
        files = {m.path for m in members}
        missing = [t.id for t in suite.tasks if not any(t.id + s in files for s in RECORDED)]
        if missing:
            shown = ", ".join(missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise UserError(
                f"{path}: arms[{index}] ({arm.name}): {arm.agent.dir} has no recorded output "
                f"for {len(missing)} task(s): {shown}; add <task_id>.diff, .abstain or "
                ".answer.json, or run with --allow-missing (each counts as an empty answer)"
            )


def command_names(controls: Controls) -> dict[str, str]:
    """Program names command arms run from the image's PATH (argv[0] without a slash),
    each with the arm that names it, for the preflight to look up in each image."""
    names: dict[str, str] = {}
    for index, arm in enumerate(controls.arms):
        if isinstance(arm.agent, CommandAgent) and "/" not in arm.agent.argv[0]:
            names.setdefault(arm.agent.argv[0], f"arms[{index}] ({arm.name})")
    return names


def _check_keys(path: Path, controls: Controls, environ: Mapping[str, str]) -> None:
    """Trials run here: the model routes' keys must be here too."""
    missing = missing_api_keys(controls, environ)
    if missing:
        field, _, variable = missing[0].partition(": ")
        raise UserError(
            f"{path}: {field}: environment variable {variable} is not set; "
            "export the API key in it (the key never goes in the controls file)"
        )


def _run_dir(
    path: Path,
    out: Path,
    resume: bool,
    loaded: LoadedControls,
    suite: Suite,
    digests: dict[str, str],
) -> tuple[RunDir, RunMeta]:
    """A new run directory, or the one resumed under the same protocol hash."""
    run_dir = RunDir(out)
    if run_dir.exists():
        if not resume:
            raise UserError(
                f"{out}: a run directory already exists; pass --resume to continue it "
                "or choose a new --out"
            )
        meta = run_dir.check_protocol(loaded.protocol_sha256)
        run_dir.repair_torn_tail()
        return run_dir, meta
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out}: exists and is not a run directory; choose a new --out")
    controls = loaded.controls
    exposed = _exposures(suite, controls.tools.forbidden_paths)
    meta = RunMeta(
        run_id=new_run_id(controls.protocol_id, now_utc()),
        protocol_id=controls.protocol_id,
        protocol_sha256=loaded.protocol_sha256,
        suite_sha256=suite.sha256,
        channel=controls.channel,
        control_arm=controls.control_arm,
        arms=[leg.name for leg in controls.legs()],
        tasks=[_task_meta(t, exposed.get(t.id)) for t in suite.tasks],
        image_digests=digests,
        agent_dir_digests=dict(sorted(loaded.agent_dir_digests.items())),
        created_at=now_utc().isoformat(),
        deltarun_version=__version__,
        python_version=platform.python_version(),
        controls_path=str(path.resolve()),
        builtin_metrics_sha256=sha256_bytes(Path(builtin_metrics.__file__).read_bytes()),
    )
    run_dir.create(meta, path.read_bytes())
    return run_dir, meta


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
