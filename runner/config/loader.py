"""Loading ``controls.yaml``: YAML, agent directory digests, the protocol hash, pins.

The file is parsed into the strict models of ``runner.config.controls`` (an unknown
or misspelt key is an error naming its path). The *protocol hash* is the
SHA-256 of the canonical JSON of the parsed controls plus the content digest of
every agent directory, so a changed byte in a recorded patch or an agent
program changes the hash and a run directory cannot be resumed under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from runner.bounded_input import load_yaml, read_capped, yaml_refusal
from runner.bounded_json import BoundsError
from runner.config.arms import Arm, CommandAgent, InstalledAgent, OpenAIAgent, PatchAgent, Route
from runner.config.controls import Controls
from runner.config.model_keys import model_key
from runner.errors import ArchiveError, UserError
from runner.hashing import sha256_bytes, sha256_json
from runner.paths import inside
from runner.trees.archives import DIRECTORY_CAPS, members_from_dir, tree_digest


class LoadedControls:
    """Controls plus where they came from and the digests of their agent directories.

    Every path the controls name (``suite.file``, an agent ``dir``, ``metrics.module``,
    ``toggles.on_files``) resolves from their folder and must stay inside ``root``: that
    folder, unless deltarun wrote the controls itself for a suite it already checked
    (``deltarun validate``'s own controls name the suite and the gold beside them)."""

    def __init__(
        self,
        controls: Controls,
        path: Path,
        agent_dirs: dict[str, str],
        root: Path | None = None,
    ) -> None:
        self.controls = controls
        self.path = path
        self.base = path.parent
        self.root = root if root is not None else self.base
        self.agent_dir_digests = agent_dirs

    def named(self, relative: str, field: str) -> Path:
        """The real path a field of the controls names, held inside ``root``."""
        return inside(self.base, relative, file=self.path, field=field, root=self.root)

    @property
    def suite_path(self) -> Path:
        return self.named(self.controls.suite.file, "suite.file")

    @property
    def metrics_path(self) -> Path | None:
        spec = self.controls.metrics
        return None if spec is None else self.named(spec.module, "metrics.module")

    def agent_dir(self, arm: Arm) -> Path | None:
        agent = arm.agent
        if isinstance(agent, PatchAgent | CommandAgent):
            index = next(i for i, a in enumerate(self.controls.arms) if a.name == arm.name)
            return self.named(agent.dir, f"arms[{index}].agent.dir")
        return None

    @property
    def protocol_sha256(self) -> str:
        return protocol_hash(self.controls, self.agent_dir_digests)


def protocol_hash(controls: Controls, agent_dir_digests: dict[str, str]) -> str:
    """SHA-256 of the canonical JSON of the controls and every agent directory's digest.

    Settings added after protocols were first recorded hash only when set (``UNSET_OMITTED``),
    so a run recorded before they existed keeps its protocol hash and still replays."""
    data = controls.model_dump(mode="json", by_alias=True)
    for section, key in UNSET_OMITTED:
        if data[section].get(key) is None:
            del data[section][key]
    for key in TOP_LEVEL_UNSET_OMITTED:
        if not data.get(key):
            data.pop(key, None)
    if data.get("gate") and data["gate"].get("sequential") is None:
        data["gate"].pop("sequential", None)  # added later: hashed only when present
    for arm in data["arms"]:
        toggles = arm.get("toggles") or {}
        for key in TOGGLES_UNSET_OMITTED:
            if not toggles.get(key):
                toggles.pop(key, None)
    return sha256_json({"controls": data, "agent_dirs": dict(sorted(agent_dir_digests.items()))})


# (section, key) of optional settings whose absence is not hashed.
UNSET_OMITTED = (
    ("runtime", "archive"),
    ("runtime", "python"),
    ("runtime", "retry_errors"),
    ("suite", "validation"),
    ("suite", "exclude"),
)
TOP_LEVEL_UNSET_OMITTED = ("prices", "budget", "gate", "rate_limits")
TOGGLES_UNSET_OMITTED = ("on_files", "on_env")


MAX_KEY_SHOWN = 60  # characters of a key an error message quotes


def format_validation_error(
    source: str, exc: ValidationError, model: type[BaseModel] = Controls, schema: str = "controls"
) -> str:
    """One line: ``source: a.b[2].c: message (and N more)``; an unknown key names the closest
    key ``model`` allows at that place, and ``deltarun schema <schema>``."""
    # A misspelt key shows up as "unknown" plus "missing"; the unknown one names the fix.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = ""
    for part in first["loc"]:
        if isinstance(part, str) and len(part) > MAX_KEY_SHOWN:  # a key quoted from input
            part = f"{part[:MAX_KEY_SHOWN]}…"
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        unknown = str(first["loc"][-1])[: MAX_KEY_SHOWN * 2]
        close = get_close_matches(unknown, _keys_at(model, first["loc"]), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        message = f"unknown key; {hint}see `deltarun schema {schema}` for the keys"
    elif first["type"] == "missing":
        message = "required key is missing"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {loc or '(top level)'}: {message}{more}"


def _keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the models at ``loc``'s parent accept (every variant of a union)."""
    current = {model}
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        found: set[type[BaseModel]] = set()
        for candidate in current:
            field = candidate.model_fields.get(part)
            if field is not None:
                found |= _models_in(field.annotation)
        current = found or current  # a union's variant tag in the path: stay
    keys: set[str] = set()
    for candidate in current:
        for name, field in candidate.model_fields.items():
            keys.add(field.alias or name)
    return sorted(keys)


def _models_in(annotation: Any) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    found: set[type[BaseModel]] = set()
    for arg in get_args(annotation):
        found |= _models_in(arg)
    return found


CONTROLS_MAX_BYTES = 1 << 20
"""The largest controls.yaml read (``runner.bounded_input``; its YAML bounds apply too)."""
FILE_CAP = DIRECTORY_CAPS.max_member_bytes  # one on_files source file


def parse_controls(text: str, source: str) -> Controls:
    """Parse controls YAML text into a ``Controls``, or raise ``UserError`` in one line."""
    try:
        data: Any = load_yaml(text)  # bounded in size, depth and values, aliases expanded
    except yaml.YAMLError as exc:
        raise UserError(yaml_refusal(source, exc)) from exc
    except BoundsError as exc:
        raise UserError(f"{source}: refused: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{source}: must be a YAML mapping with protocol_id, suite and arms")
    try:
        return Controls.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(source, exc)) from exc


def scored_channel_problems(
    controls: Controls, images_used: set[str], image_digests: dict[str, str]
) -> list[str]:
    """What stops a ``channel: scored`` run: every pin must be present and match."""
    problems: list[str] = []
    if not controls.suite.sha256:
        problems.append("suite.sha256 is empty; run `deltarun seal` on the controls file")
    policy = controls.runtime.retry_errors
    if controls.runtime.max_retries != 0 and policy is None:
        problems.append(
            "runtime.max_retries must be 0 in the scored channel (or declare "
            "runtime.retry_errors: {max_per_job: N} with max_retries at most N)"
        )
    elif policy is not None and controls.runtime.max_retries > policy.max_per_job:
        problems.append(
            f"runtime.max_retries {controls.runtime.max_retries} exceeds "
            f"runtime.retry_errors.max_per_job {policy.max_per_job}"
        )
    for image in sorted(images_used):
        if image not in controls.images:
            problems.append(f"images.{image!r} is not pinned; pin it to {image_digests.get(image)}")
    return problems


def missing_api_keys(controls: Controls, environ: Mapping[str, str]) -> list[str]:
    """Where a used route names an API-key variable this environment lacks (``field: VAR``)."""
    used: list[tuple[str, Route | None]] = []
    if controls.runtime.network == "model-only":
        used.append(("route", controls.route))
    for index, arm in enumerate(controls.arms):
        if isinstance(arm.agent, OpenAIAgent | InstalledAgent):
            field = f"arms[{index}].agent.route" if arm.agent.route else "route"
            used.append((field, controls.route_for(arm.agent)))
    found: list[str] = []
    for field, route in used:
        if route is None or route.api_key_env is None:
            continue
        entry = f"{field}.api_key_env: {route.api_key_env}"
        if not model_key(route.api_key_env, route.base_url, environ) and entry not in found:
            found.append(entry)
    return found


def load_controls(path: Path, root: Path | None = None) -> LoadedControls:
    """Read ``controls.yaml`` and digest every agent directory it names; every path it
    names must stay inside ``root`` (default its folder: ``LoadedControls``). The file itself
    is held inside the folder it is named in: a link a package ships there that leads out
    would make another folder the base of every path it names (and where validate writes)."""
    path = inside(path.parent, path.name, file=path, field="the controls file")
    try:
        text = read_capped(path, CONTROLS_MAX_BYTES, "a controls file").decode("utf-8")
    except FileNotFoundError as exc:
        raise UserError(f"{path}: controls file not found; pass the path of controls.yaml") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the controls file ({exc})") from exc
    controls = parse_controls(text, str(path))
    loaded = LoadedControls(controls, path.resolve(), {}, root)
    loaded.suite_path  # noqa: B018  every path is checked on loading, whatever reads it later
    loaded.metrics_path  # noqa: B018
    for index, arm in enumerate(controls.arms):
        if arm.toggles is not None and arm.toggles.on_files:
            loaded.agent_dir_digests[f"{arm.name}:on_files"] = _on_files_digest(
                loaded, index, arm.toggles.on_files
            )
        directory = loaded.agent_dir(arm)
        if directory is None:
            continue
        if not directory.is_dir():
            raise UserError(
                f"{path}: arms[{index}].agent.dir: {directory} is not a directory; "
                "fix the path (relative to controls.yaml)"
            )
        try:
            loaded.agent_dir_digests[arm.name] = tree_digest(members_from_dir(directory))
        except ArchiveError as exc:
            raise UserError(f"{path}: arms[{index}].agent.dir: {exc}") from exc
    return loaded


def _on_files_digest(loaded: LoadedControls, index: int, on_files: Mapping[str, str]) -> str:
    """The digest of an installed agent's -on leg files: each target with its source's digest
    (a file's bytes, or a directory's tree digest)."""
    pairs = []
    for target, source in sorted(on_files.items()):
        field = f"arms[{index}].toggles.on_files.{target}"
        where = f"{loaded.path}: {field}"
        found = loaded.named(source, field)
        try:
            if found.is_dir():
                digest = tree_digest(members_from_dir(found))
            else:
                digest = sha256_bytes(read_capped(found, FILE_CAP, "an on_files source"))
        except FileNotFoundError as exc:
            raise UserError(
                f"{where}: {found} not found; fix the path (relative to controls.yaml)"
            ) from exc
        except (OSError, ArchiveError) as exc:
            raise UserError(f"{where}: {exc}") from exc
        pairs.append([target, digest])
    return sha256_json(pairs)
