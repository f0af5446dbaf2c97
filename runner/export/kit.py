"""``deltarun export RUN_DIR --kit DIR``: a kit a stranger can rerun.

    DIR/controls.yaml       the run's stored controls, byte for byte
    DIR/<suite.file>        tasks.jsonl, and every fixture and hidden archive it names, and
                            validation.json beside it when the controls pin it (scored runs)
    DIR/<agent dir>/...     every agent directory (patch and command arms)
    DIR/<metrics.module>    the metrics module, when the controls name one
    DIR/run/                the evidence: run.json, controls.yaml, trials.jsonl, report.*,
                            task_texts.jsonl (the prompts and tags the viewer shows; a run
                            recorded before the file existed has none) and edits.json when
                            the run has accepted ledger edits
    DIR/replay.sh           checks every digest, then reruns (default) or re-verifies
    DIR/README.md           what each file is, and the two ways to run replay.sh

**Where the inputs come from.** The originals are found from the folder of the
controls the run was made with: run.json's ``controls_path`` (a hint, valid on the
machine that ran it while nothing moved), or ``--controls`` when they have moved. Only
that folder is taken from there: the controls written into the kit are the run
directory's stored copy.

**Layout: the same relative paths.** ``suite.file``, every agent ``dir`` and
``metrics.module`` are strings inside the controls, so they enter the protocol
hash; the archive paths are strings inside tasks.jsonl, so they enter the suite
digest. None of them can be rewritten. Each file therefore goes where its
string leads from the kit's controls.yaml, resolved lexically (the kit holds
no symbolic links, so lexical resolution is what ``load_controls`` and
``load_suite`` will do in it). Every one of them is held inside the folder of
the file naming it (``runner.paths.inside``), as every command holds them: an
absolute path, a ``..`` or a symbolic link that leads out is refused in one
line naming the stored controls (or tasks.jsonl), the field and the path
(exit 2), and nothing is read from where it leads. Refused too, each in one
line naming the path (exit 1): a path that lands on the kit's own ``run/``,
``replay.sh``, ``README.md`` or ``rerun-*``, an agent directory that would be
the kit's top folder (its digest would then cover those files), and two inputs
that need different bytes at one path.

**Checks.** Every file is copied into a staging folder beside DIR and hashed as
it is copied: tasks.jsonl against run.json's suite digest, each archive against
its pin in tasks.jsonl, each agent directory against run.json's
``agent_dir_digests``, the metrics module against ``metrics.sha256``. A
difference stops the export with exit 3 naming the file, and the staging
folder is removed, so DIR never holds unverified bytes. At the end the kit's
controls.yaml is loaded with ``load_controls`` and must hash to the run's
``protocol_sha256`` (exit 3 otherwise), and its suite is loaded with
``load_suite`` against the run's suite digest; only then is the staging folder
renamed to DIR.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from runner.bounded_input import TASKS_MAX_BYTES, open_regular, read_capped
from runner.config.arms import CommandAgent, PatchAgent
from runner.config.controls import Controls
from runner.config.loader import CONTROLS_MAX_BYTES, load_controls, parse_controls
from runner.errors import DigestMismatch, ProtocolMismatch, SuitePathError, UserError
from runner.export.kit_files import KitInput, kit_readme, replay_script
from runner.hashing import sha256_bytes
from runner.paths import inside
from runner.records import GitRepo, RepoTask, Task
from runner.store.rundir import LEDGER, RUN_FILE, TASK_TEXTS, RunDir, RunMeta
from runner.suite.lines import lines_of
from runner.suite.load import load_suite, task_of
from runner.suite.sealing import VALIDATION_NAME
from runner.trees.archives import members_from_dir, tree_digest

EVIDENCE = "run"
SCRIPT = "replay.sh"
README = "README.md"
RESERVED = (EVIDENCE, SCRIPT, README)
INPUT_MAX_BYTES = 16 << 30  # one file the kit copies: a regular file, within this
EVIDENCE_FILES = (
    RUN_FILE,
    "controls.yaml",
    LEDGER,
    "report.md",
    "report.json",
    "report.html",
    TASK_TEXTS,
    "edits.json",
)
REQUIRED_EVIDENCE = (RUN_FILE, "controls.yaml", LEDGER)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Kit:
    """What ``export_kit`` wrote."""

    path: Path
    controls: str  # kit-relative path of controls.yaml
    run_id: str
    protocol_sha256: str
    suite_sha256: str
    files: int  # files listed in replay.sh's digest list


@dataclass
class _Staging:
    root: Path
    written: dict[str, str] = field(default_factory=dict)  # kit-relative path → sha256

    def claim(self, rel: str, digest: str, what: str) -> bool:
        """False when ``rel`` already holds these bytes; refuses other bytes at one path."""
        have = self.written.get(rel)
        if have is None:
            self.written[rel] = digest
            return True
        if have != digest:
            raise UserError(
                f"{what}: {rel} is also another input of the kit with other bytes; two inputs "
                "cannot share one path"
            )
        return False

    def target(self, rel: str) -> Path:
        path = self.root / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{rel}: cannot lay it out in the kit ({exc})") from exc
        return path

    def put_bytes(self, rel: str, data: bytes, what: str, *, executable: bool = False) -> None:
        if not self.claim(rel, sha256_bytes(data), what):
            return
        path = self.target(rel)
        try:
            path.write_bytes(data)
            path.chmod(0o755 if executable else 0o644)
        except OSError as exc:
            raise UserError(f"{rel}: cannot write it into the kit ({exc})") from exc

    def copy_verified(self, ref: KitInput, rel: str) -> None:
        """Copy ``ref.original`` to ``rel``, hashing while copying; exit 3 on another digest."""
        path = self.target(rel)
        digest = hashlib.sha256()
        tmp = path.with_name(path.name + ".export-tmp")
        try:
            with (  # suite input: a regular file (a FIFO is not waited on)
                open_regular(ref.original, INPUT_MAX_BYTES, ref.what) as source,
                tmp.open("wb") as sink,
            ):
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    sink.write(chunk)
        except FileNotFoundError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(
                f"{ref.original}: {ref.what} not found; restore it (or pass --controls where "
                "the run's inputs now are)"
            ) from exc
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(f"{ref.original}: cannot copy {ref.what} ({exc})") from exc
        actual = digest.hexdigest()
        if actual != ref.pin:
            tmp.unlink(missing_ok=True)
            raise DigestMismatch(
                f"{ref.original}: digest mismatch for {ref.what}: pinned {ref.pin}, file has "
                f"{actual}; restore the file (no kit was written)"
            )
        if not self.claim(rel, actual, ref.what):
            tmp.unlink()
            return
        tmp.chmod(0o644)
        os.replace(tmp, path)


def export_kit(run_dir: RunDir, kit: Path, controls_path: Path | None = None) -> Kit:
    """Write the kit of ``run_dir`` into ``kit`` (new or empty); see the module docstring."""
    meta = run_dir.meta()
    stored = run_dir.path / "controls.yaml"
    try:  # a run directory is input: held inside it, capped
        held = inside(run_dir.path, "controls.yaml", file=run_dir.path, field="controls.yaml")
        controls_bytes = read_capped(held, CONTROLS_MAX_BYTES, "controls")
        controls = parse_controls(controls_bytes.decode("utf-8"), str(stored))
    except FileNotFoundError as exc:
        raise UserError(f"{stored}: missing; a run directory keeps the controls as run") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{stored}: not UTF-8 ({exc})") from exc
    for name in REQUIRED_EVIDENCE:
        if not (run_dir.path / name).is_file():
            raise UserError(f"{run_dir.path / name}: missing; restore it from a copy of the run")
    _check_target(kit)
    base = _origin(run_dir, meta, controls_path)
    suite_ref, tasks_bytes = _read_suite(controls, base, meta, stored)
    tasks = _parse_tasks(tasks_bytes, suite_ref.original)
    refs = [suite_ref, *_archive_refs(suite_ref, tasks), *_validation_ref(controls, suite_ref)]
    refs += _other_refs(controls, base, meta, stored)
    layout = [(ref, ref.rel) for ref in refs]
    controls_rel = "controls.yaml"
    for ref, rel in layout:
        _check_place(ref, rel)
        if ref.is_dir and kit.resolve().is_relative_to(ref.original):
            raise UserError(
                f"{kit}: inside {ref.what} ({ref.original}), whose digest it would change; "
                "choose a --kit directory outside the run's inputs"
            )
    _check_place(KitInput("the kit's controls.yaml", "controls.yaml", stored, ""), controls_rel)

    kit = kit.absolute()
    kit.parent.mkdir(parents=True, exist_ok=True)
    staging = _Staging(kit.parent / f".{kit.name}.export-{secrets.token_hex(4)}")
    staging.root.mkdir()
    try:
        staging.put_bytes(controls_rel, controls_bytes, "the kit's controls.yaml")
        staging.put_bytes(layout[0][1], tasks_bytes, suite_ref.what)
        for ref, rel in layout[1:]:
            if ref.is_dir:
                _copy_agent_dir(staging, ref, rel)
            else:
                staging.copy_verified(ref, rel)
        _check_kit(staging.root / controls_rel, kit / controls_rel, meta)
        evidence = _copy_evidence(staging, run_dir)
        sums = sorted(staging.written.items())
        staging.put_bytes(SCRIPT, replay_script(meta, controls_rel, sums).encode(), SCRIPT)
        os.chmod(staging.root / SCRIPT, 0o755)
        staging.put_bytes(README, kit_readme(meta, controls_rel, layout, evidence).encode(), README)
        if kit.exists():
            kit.rmdir()  # checked empty above
        os.replace(staging.root, kit)
    except BaseException:
        shutil.rmtree(staging.root, ignore_errors=True)
        raise
    return Kit(kit, controls_rel, meta.run_id, meta.protocol_sha256, meta.suite_sha256, len(sums))


def _check_target(kit: Path) -> None:
    if kit.is_symlink():  # never written through, whatever it points at (paths.new_folder)
        raise SuitePathError(f"--kit {kit}: a symbolic link; choose a new --kit directory")
    if kit.exists() and not kit.is_dir():
        raise UserError(f"{kit}: exists and is not a directory; choose a new --kit directory")
    if kit.is_dir() and any(kit.iterdir()):
        raise UserError(f"{kit}: exists and is not empty; choose a new or empty --kit directory")


def _origin(run_dir: RunDir, meta: RunMeta, controls_path: Path | None) -> Path:
    """The folder the run's controls were in (resolved): ``--controls`` or run.json's."""
    if controls_path is not None:
        if not controls_path.is_file():
            raise UserError(
                f"{controls_path}: --controls: not a file; pass the run's controls.yaml"
            )
        return controls_path.resolve().parent
    recorded = meta.controls_path
    if not recorded:
        raise UserError(
            f"{run_dir.path / RUN_FILE}: no controls_path recorded; pass --controls PATH "
            "(the run's controls.yaml beside its suite)"
        )
    if not Path(recorded).is_file():
        raise UserError(
            f"{run_dir.path / RUN_FILE}: controls_path {recorded} does not exist here; pass "
            "--controls PATH (the run's controls.yaml where its suite now is)"
        )
    return Path(recorded).resolve().parent


def _read_suite(
    controls: Controls, base: Path, meta: RunMeta, stored: Path
) -> tuple[KitInput, bytes]:
    """tasks.jsonl's bytes, checked against the run's suite digest."""
    original = inside(base, controls.suite.file, file=stored, field="suite.file")
    rel = posixpath.normpath(controls.suite.file)
    ref = KitInput("suite.file (tasks.jsonl)", rel, original, meta.suite_sha256)
    try:
        data = read_capped(original, TASKS_MAX_BYTES, "tasks.jsonl")
    except FileNotFoundError as exc:
        raise UserError(
            f"{original}: tasks file not found; restore the suite or pass --controls where "
            "the run's controls and suite now are"
        ) from exc
    actual = sha256_bytes(data)
    if actual != meta.suite_sha256:
        raise DigestMismatch(
            f"{original}: digest mismatch: the run's suite digest is {meta.suite_sha256}, "
            f"the file has {actual}; restore the suite the run was made with (no kit was written)"
        )
    return ref, data


def _parse_tasks(data: bytes, source: Path) -> list[Task]:
    """The task lines, split and bounded as every reader of tasks.jsonl does
    (``runner.suite.lines``): a U+2028 inside a prompt does not end its line."""
    return [task_of(line.data, f"{source}:{line.number}") for line in lines_of(data, source)]


def _fixture_file(task: RepoTask) -> str:
    """The file a task's fixture is: its tar or its git bundle (pinned by repo_sha256)."""
    if not isinstance(task.repo, GitRepo):
        return task.repo
    if not task.repo_sha256:
        raise UserError(
            f"task {task.id!r}: its fixture is a bare repository directory, which a kit cannot "
            "carry; name a bundle instead (git bundle create FILE --all) and re-seal"
        )
    return task.repo.git


def _archive_refs(suite: KitInput, tasks: list[Task]) -> list[KitInput]:
    """Every fixture and hidden archive, once per path (pinned alike by every task)."""
    refs: dict[str, KitInput] = {}
    folder = posixpath.dirname(suite.rel)
    for task in tasks:
        if not isinstance(task, RepoTask):
            continue
        named = [("repo", _fixture_file(task), task.repo_sha256)]
        if task.hidden is not None:
            named.append(("hidden", task.hidden, task.hidden_sha256))
        if task.environment is not None:
            # The build context is pinned by the task line (environment_sha256), a tree digest.
            what = f"task {task.id!r} environment {task.environment!r}"
            value = f"environments/{task.environment}"
            rel = posixpath.normpath(posixpath.join(folder, value))
            original = inside(suite.original.parent, value, file=suite.original, field=what)
            refs.setdefault(
                rel, KitInput(what, rel, original, task.environment_sha256, is_dir=True)
            )
        for field_name, value, pin in named:
            what = f"task {task.id!r} {field_name}"
            original = inside(suite.original.parent, value, file=suite.original, field=what)
            rel = posixpath.normpath(posixpath.join(folder, value))
            ref = KitInput(what, rel, original, pin)
            seen = refs.setdefault(rel, ref)
            if seen.pin != pin:
                raise DigestMismatch(
                    f"{suite.original}: {what} and {seen.what} name {value} with different "
                    "digests; restore the suite the run was made with"
                )
    return list(refs.values())


def _validation_ref(controls: Controls, suite: KitInput) -> list[KitInput]:
    """The suite's validation.json when the controls pin it (a scored run needs it)."""
    pinned = controls.suite.validation
    if not pinned:
        return []
    rel = posixpath.join(posixpath.dirname(suite.rel), VALIDATION_NAME)
    original = inside(
        suite.original.parent, VALIDATION_NAME, file=suite.original, field="suite.validation"
    )
    return [KitInput(f"suite.validation ({VALIDATION_NAME})", rel, original, pinned)]


def _other_refs(controls: Controls, base: Path, meta: RunMeta, stored: Path) -> list[KitInput]:
    """Every agent directory (pinned by run.json) and the metrics module (pinned in controls)."""
    refs: list[KitInput] = []
    for index, arm in enumerate(controls.arms):
        if not isinstance(arm.agent, PatchAgent | CommandAgent):
            continue
        what = f"arms[{index}].agent.dir of arm {arm.name!r}"
        pin = meta.agent_dir_digests.get(arm.name, "")
        if not pin:
            raise DigestMismatch(
                f"{RUN_FILE}: agent_dir_digests has no digest of arm {arm.name!r}; the run "
                "directory does not match its controls"
            )
        original = inside(base, arm.agent.dir, file=stored, field=f"arms[{index}].agent.dir")
        rel = posixpath.normpath(arm.agent.dir)
        refs.append(KitInput(what, rel, original, pin, is_dir=True))
    spec = controls.metrics
    if spec is not None:
        if not spec.sha256:
            raise UserError("controls.yaml: metrics.sha256 is empty; the module is not pinned")
        original = inside(base, spec.module, file=stored, field="metrics.module")
        rel = posixpath.normpath(spec.module)
        refs.append(KitInput("metrics.module", rel, original, spec.sha256))
    return refs


def _check_place(ref: KitInput, rel: str) -> None:
    """A kit path must stay inside the kit and off the kit's own files."""
    first = rel.split("/")[0]
    if rel == "." and ref.is_dir:
        raise UserError(
            f"{ref.what}: {ref.rel} would be the kit's top folder, whose run/, replay.sh and "
            "README.md would change its digest; move the agent directory into a subfolder"
        )
    if first in RESERVED or first.startswith("rerun-") or first == "..":
        raise UserError(
            f"{ref.what}: {ref.rel} would land on {first} of the kit (its run/, replay.sh, "
            "README.md and rerun-* are the kit's own); rename that folder and run again"
        )


def _copy_agent_dir(staging: _Staging, ref: KitInput, rel: str) -> None:
    """Read the directory, check its tree digest (paths, executable bits, bytes), write it."""
    if not ref.original.is_dir():
        raise UserError(
            f"{ref.original}: {ref.what} is not a directory; restore it (or pass --controls "
            "where the run's inputs now are)"
        )
    members = members_from_dir(ref.original)
    actual = tree_digest(members)
    if actual != ref.pin:
        raise DigestMismatch(
            f"{ref.original}: digest mismatch for {ref.what}: the run pins {ref.pin}, the "
            f"directory has {actual}; restore it as it was run (no kit was written)"
        )
    try:
        (staging.root / rel).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{rel}: cannot lay it out in the kit ({exc})") from exc
    for member in members:
        path = posixpath.join(rel, member.path)
        if member.is_dir:
            try:
                (staging.root / path).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"{path}: cannot lay it out in the kit ({exc})") from exc
        else:
            staging.put_bytes(path, member.data, ref.what, executable=member.executable)


def _check_kit(controls: Path, shown: Path, meta: RunMeta) -> None:
    """The kit's controls hash to the run's protocol, and its suite to the run's digest."""
    loaded = load_controls(controls)
    if loaded.protocol_sha256 != meta.protocol_sha256:
        raise ProtocolMismatch(
            f"{shown}: the kit's controls hash to protocol {loaded.protocol_sha256}, not the "
            f"run's {meta.protocol_sha256}; no kit was written"
        )
    load_suite(loaded.suite_path, meta.suite_sha256, loaded.controls.runtime.archive_caps)


def _copy_evidence(staging: _Staging, run_dir: RunDir) -> list[str]:
    copied: list[str] = []
    for name in EVIDENCE_FILES:
        source = run_dir.path / name
        if not source.is_file():
            continue
        # A link out of the run directory (report.md to a key file) is refused, not copied.
        held = inside(run_dir.path, name, file=run_dir.path, field=name)
        data = read_capped(held, INPUT_MAX_BYTES, "evidence")
        staging.put_bytes(f"{EVIDENCE}/{name}", data, f"{source}")
        copied.append(name)
    return copied


__all__ = ["Kit", "export_kit"]
