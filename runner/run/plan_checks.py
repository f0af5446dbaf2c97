"""The checks a run must pass before anything is written or any trial starts, each a
small function with its own test (``runner.run.prepare.STEPS`` orders them by what each
needs). One line naming the file, the field and the fix on a failure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from runner.agents.factory import agent_members
from runner.agents.interface import ANSWER_BOUNDS
from runner.bounded_input import read_capped
from runner.bounded_json import BoundsError, loads_bounded
from runner.config.arms import CommandAgent, PatchAgent
from runner.config.controls import Controls
from runner.config.loader import (
    LoadedControls,
    missing_api_keys,
    scored_channel_problems,
)
from runner.config.model_keys import KEYS_DIR_ENV, where_keys_are
from runner.errors import DigestMismatch, ProtocolMismatch, UserError
from runner.grading.metrics import Metric
from runner.grading.validation import FINE
from runner.hashing import sha256_bytes
from runner.paths import inside
from runner.records import AnswerTask, RepoTask
from runner.sandbox.base import AGENT_DIR
from runner.suite.load import Suite
from runner.suite.sealing import VALIDATION_BOUNDS, VALIDATION_NAME


def check_expected(path: Path, actual: str, expected: str | None) -> None:
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


def without_excluded(path: Path, controls: Controls, suite: Suite) -> Suite:
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


def check_validation(path: Path, controls: Controls, suite: Suite) -> None:
    """channel scored: the suite's validation.json is pinned, unchanged, of this suite
    digest, and every task is valid (or answer-only) unless ``suite.exclude`` lists it."""
    pinned = controls.suite.validation
    found = inside(suite.root, VALIDATION_NAME, file=suite.path, field="suite.validation")
    if pinned is None:
        raise UserError(
            f"{path}: channel scored needs a validated suite: run `deltarun validate {path}`, "
            f"then `deltarun seal {path}` (it pins {VALIDATION_NAME} as suite.validation)"
        )
    try:  # suite input: a regular file, capped, its JSON bounded before it is parsed
        raw = read_capped(found, VALIDATION_BOUNDS.max_bytes, VALIDATION_NAME)
    except OSError as exc:
        raise UserError(f"{found}: cannot read the pinned validation ({exc})") from exc
    digest = sha256_bytes(raw)
    if digest != pinned:
        raise DigestMismatch(
            f"{found}: digest mismatch: controls pin {pinned}, file has {digest}; restore it "
            "or validate again and seal the controls"
        )
    try:
        data = loads_bounded(raw, VALIDATION_BOUNDS)
    except BoundsError:
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


def check_metrics(suite: Suite, metrics: Mapping[str, Metric]) -> None:
    for number, task in enumerate(suite.tasks, start=1):
        if isinstance(task, AnswerTask):
            unknown = [name for name in task.metrics if name not in metrics]
            if unknown:
                raise UserError(
                    f"{suite.path}:{number}: metrics: {unknown[0]!r} is neither built in nor "
                    "listed under metrics.functions in controls"
                )


def check_pins(path: Path, controls: Controls, used: set[str], digests: Mapping[str, str]) -> None:
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


def environment_tags(suite: Suite) -> set[str]:
    return {
        t.environment_tag
        for t in suite.tasks
        if isinstance(t, RepoTask) and t.environment_tag is not None and t.environment_image
    }


def check_environments(suite: Suite, digests: Mapping[str, str]) -> None:
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


def check_agent_paths(path: Path, loaded: LoadedControls) -> None:
    """A command arm's argv names files of its directory (under /opt/agent) that exist:
    a wrong path would make every trial a miss with exit 127, scored as the agent's."""
    for index, arm in enumerate(loaded.controls.arms):
        if not isinstance(arm.agent, CommandAgent):
            continue
        members = agent_members(arm.agent, loaded.base, loaded.root) or []
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


def check_recorded(path: Path, loaded: LoadedControls, suite: Suite, allow: bool) -> None:
    """A patch arm's recorded answers are JSON, and it has a recorded output for every task
    (``--allow-missing``: a missing one counts as an empty answer, and the report's setup
    warnings name it)."""
    for index, arm in enumerate(loaded.controls.arms):
        if not isinstance(arm.agent, PatchAgent):
            continue
        members = [
            m for m in agent_members(arm.agent, loaded.base, loaded.root) or [] if not m.is_dir
        ]
        for member in members:
            if member.path.endswith(".answer.json"):
                try:  # bounded before it is parsed, as the trial reads it (parse_answer)
                    loads_bounded(member.data, ANSWER_BOUNDS)
                except BoundsError as exc:
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


def check_keys(path: Path, controls: Controls, environ: Mapping[str, str]) -> None:
    """Trials run here: the model routes' keys must be here too, each bound for where its
    owner lets it go (``runner.config.model_keys``): one line naming the controls file."""
    try:
        missing = missing_api_keys(controls, environ)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from exc
    if missing:
        field, _, variable = missing[0].partition(": ")
        raise UserError(
            f"{path}: {field}: {where_keys_are(variable, environ)}; export the API key in it, "
            f"or write it to a file {variable} in the directory ${KEYS_DIR_ENV} (the key never "
            "goes in the controls file)"
        )


# OCI runtimes whose sandboxes have no network at all as deltarun registers them
# (scripts/ensure-gvisor.sh: gVisor's runsc with --network=none).
NO_NETWORK_RUNTIMES = frozenset({"runsc"})


def check_runtime(path: Path, controls: Controls) -> None:
    """A run whose agent sandboxes reach a model (``network: model-only``, which installed
    agents need too) cannot use a runtime without a network: one line naming the field."""
    runtime = controls.runtime.oci_runtime
    if runtime in NO_NETWORK_RUNTIMES and controls.runtime.network == "model-only":
        raise UserError(
            f"{path}: runtime.oci_runtime {runtime}: its sandboxes have no network (gVisor "
            "registered with --network=none, `make gvisor`), and runtime.network is "
            "model-only: the agent's sandbox reaches the model through the gateway; run it "
            "under runc (unset oci_runtime) or with network: none"
        )
