"""The agent sandbox's harness steps: the staged trees it may mount instead of copies, copy
in, baseline, end the agent, take the patch.

Each runs through the ``Sandbox`` interface. Root here has no capabilities: it
owns ``/baseline`` and nothing of the agent's, which is why the agent's own uid
makes its files readable and kills its own processes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.agents.interface import AGENT_ENV, GUARD_FILE, PROMPT_FILE
from runner.errors import InfraError
from runner.sandbox.base import (
    BASELINE_DIR,
    IO_DIR,
    ROOT_USER,
    WORKSPACE,
    ExecRequest,
    Sandbox,
    StagedTree,
)
from runner.sandbox.copy_in import unpack_as_agent
from runner.sandbox.end_mark import run_whole
from runner.sandbox_scripts import source
from runner.trees import harness_git
from runner.trees.archives import Entry, owned_tar
from runner.trees.install import PIP_ENV, failure, install_script
from runner.trees.staging import StagedFixture

# Patches up to this size are verified; the record stores at most caps.patch_bytes.
MAX_VERIFY_PATCH_BYTES = 64 << 20
# A prompt up to this size travels in one environment string (Linux allows 128 KiB).
MAX_ENV_PROMPT_BYTES = 100 << 10
_GIT_ENV = {
    "GIT_DIR": f"{BASELINE_DIR}/git",
    "GIT_WORK_TREE": WORKSPACE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "HOME": BASELINE_DIR,
    "PATH": "/usr/bin:/bin",
}
GIT = harness_git.shell()
STAT_CHECK = "-c core.checkStat=minimal -c core.trustctime=false"


def staged_trees(
    fixture: StagedFixture, exclude: tuple[str, ...], baseline: bool
) -> dict[str, Callable[[], StagedTree | None]]:
    """The fixture's staged trees for a sandbox that can mount them (``SandboxSpec.
    staged_trees``), each made only when one asks: the workspace, and with ``baseline`` the
    agent sandbox's ``/baseline``."""

    def tree(make: Callable[[tuple[str, ...]], tuple[Path, int] | None]) -> StagedTree | None:
        staged = make(exclude)
        return None if staged is None else StagedTree(*staged)

    trees = {WORKSPACE: lambda: tree(fixture.workspace_tree)}
    if baseline:
        trees[BASELINE_DIR] = lambda: tree(fixture.baseline_tree)
    return trees


def copy_in(sandbox: Sandbox, tar: Path | bytes | None) -> None:
    """The fixture's tar as the agent's uid (``runner.trees.staging.StagedFixture``, staged
    once or built for this trial) into ``/workspace``; None: there is no fixture."""
    if tar is not None:
        unpack_as_agent(sandbox, WORKSPACE, tar)


def _root(
    sandbox: Sandbox, script: str, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> bytes:
    """Run a harness shell script as root (no capabilities); an infra error if it fails."""
    result = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", script],
            user=ROOT_USER,
            env={**_GIT_ENV, **(env or {})},
            timeout_s=timeout_s,
            output_cap=1 << 16,
        )
    )
    if result.exit_code != 0 or result.timed_out:
        tail = result.output[-500:].decode("utf-8", "replace")
        raise InfraError(f"harness step failed (exit {result.exit_code}): {tail}")
    return result.output


def baseline(sandbox: Sandbox, prompt: str, guard: bool, staged: Path | None = None) -> None:
    """Commit the workspace as given into the root-only /baseline, whose attributes file
    switches off every workspace attribute, and write the prompt (and, for agents that
    run programs, the guard) into /io, root-owned and read-only to the agent.

    ``staged`` is that git directory already made on the host (``runner.trees.staging``): it
    is copied in instead of committing in the sandbox, which reads and compresses the
    whole tree; a sandbox whose ``/baseline`` is a view of it (``Sandbox.prefilled``)
    needs neither. Then the prompt and guard travel in one root-owned archive and no
    process runs; only a commit made in the sandbox takes an exec, and then a prompt that
    fits one environment string travels in the environment of that root process, which
    has ended before the agent starts.
    """
    commit = BASELINE_DIR not in sandbox.prefilled and staged is None
    if staged is not None and BASELINE_DIR not in sandbox.prefilled:
        sandbox.put_archive(BASELINE_DIR, staged)
    data = prompt.encode("utf-8")
    inline = commit and len(data) <= MAX_ENV_PROMPT_BYTES
    files = [] if inline else [Entry(PROMPT_FILE.rsplit("/", 1)[1], data, 0, 0o444)]
    if guard:
        files.append(Entry(GUARD_FILE.rsplit("/", 1)[1], source("guard.py"), 0, 0o444))
    if files:
        sandbox.put_archive(IO_DIR, owned_tar(files))
    if not commit:
        return
    script = (
        f"{GIT} init -q && mkdir -p {BASELINE_DIR}/git/info && printf %s "
        f"'{harness_git.NEUTRAL_ATTRIBUTES}' > {BASELINE_DIR}/git/info/attributes && "
        f"{GIT} add -A && {GIT} -c user.name=deltarun -c user.email=deltarun@localhost "
        "commit -q --no-verify --allow-empty -m baseline"
    )
    if inline:
        script += f' && printf %s "$DELTARUN_PROMPT" > {PROMPT_FILE} && chmod 0444 {PROMPT_FILE}'
    _root(sandbox, script, env={"DELTARUN_PROMPT": prompt} if inline else None)


def install(sandbox: Sandbox, steps: list[str], timeout_s: float) -> str | None:
    """The task's install step in the agent's sandbox, after the baseline and before the
    agent, as the agent's uid; what it leaves in the workspace (``*.egg-info``, build
    folders) is kept out of the agent's patch. The reason when a step fails (the agent
    still runs; the verify phase's own install decides)."""
    result = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", install_script(steps)],
            env={**AGENT_ENV, **PIP_ENV},
            timeout_s=timeout_s,
            output_cap=1 << 16,
        )
    )
    _root(
        sandbox,
        f"{GIT} ls-files --others --directory | sed 's|^|/|' >> {BASELINE_DIR}/git/info/exclude",
    )
    if result.exit_code == 0 and not result.timed_out:
        return None
    output = result.output.decode("utf-8", "replace")
    return failure(steps, output, result.exit_code, result.timed_out)


def stop_agent(sandbox: Sandbox) -> None:
    """Kill every process of the agent's uid: nothing the agent started runs on while the
    harness takes its patch (``guard.py sweep``, a fresh process of that uid). It starts in
    ``/``: an empty or relative entry of the image's ``LD_LIBRARY_PATH`` names the working
    directory, and the workspace holds what the agent left (``runner.sandbox.image_env``)."""
    sandbox.run(
        ExecRequest(
            argv=["python3", "-I", "-S", GUARD_FILE, "sweep"],
            workdir="/",
            env={"PATH": AGENT_ENV["PATH"], "LANG": "C.UTF-8"},
            timeout_s=30,
            output_cap=4096,
        )
    )


def _make_readable(sandbox: Sandbox) -> None:
    """Make the agent's files readable to the harness (the agent may ``chmod 000`` them),
    from ``/`` as the sweep (``stop_agent``): nothing the agent left is loaded."""
    sandbox.run(
        ExecRequest(
            argv=["sh", "-c", f"chmod -R u+rwX,go+rX {WORKSPACE} 2>/dev/null; true"],
            workdir="/",
            env=AGENT_ENV,
            timeout_s=60,
        )
    )


def take_patch(sandbox: Sandbox) -> tuple[bytes, bool, str | None]:
    """(patch, truncated, problem): ``git diff``'s stdout against the baseline, exactly.

    Only stdout is the patch (git's warnings, which name agent-chosen paths, go to
    stderr). A file counts as untouched when its size, mode and modification time
    are the baseline's (``core.checkStat=minimal``; inode and change time differ
    after any copy): git then need not read it. Only an agent that edits a file and
    puts its size and time back can keep a change out of its patch, and a change
    left out is never verified, so that can only cost the agent. Files git refuses to
    index (names it reserves, such as ``.GIT/x``) are left out of the patch rather
    than losing the rest. A git that fails on the workspace the agent left gives a
    problem instead of a patch; an engine failure raises ``SandboxError``
    (infrastructure), and so does a patch the engine never delivered whole: its stream
    can end before the command's last output (moby/moby#27289, seen here under load as
    an empty patch of an agent that had edited), and a patch cut short is never graded
    as the agent's (the command only reads, so it runs again first: ``run_whole``).
    """
    request = ExecRequest(
        argv=[
            "sh",
            "-c",
            # A path git refuses to index (".GIT/x") is left out, the rest is taken.
            # A lock left by a git add that was killed, on the first try, is stale.
            f"rm -f {BASELINE_DIR}/git/index.lock; "
            f"{GIT} {STAT_CHECK} add -A --ignore-errors >/dev/null; code=$?; "
            # Killed (a sparse file whose pages the full tmpfs cannot give, SIGBUS): the
            # index is stale, and a diff now would silently leave out the agent's changes.
            'if [ "$code" -ge 128 ]; then echo "git add was killed by signal $((code - 128))" >&2; '
            f"exit $code; fi; {GIT} diff --cached --binary "
            "--no-color --no-ext-diff --no-textconv --no-renames HEAD",
        ],
        user=ROOT_USER,
        env=_GIT_ENV,
        timeout_s=120,
        output_cap=MAX_VERIFY_PATCH_BYTES,
        separate_stderr=True,
    )
    result = run_whole(sandbox, request, "the patch command")
    if _failed(result.exit_code, result.timed_out, result.output_truncated):
        _make_readable(sandbox)
        result = run_whole(sandbox, request, "the patch command")
    if result.output_truncated:
        return result.output, True, None
    if _failed(result.exit_code, result.timed_out, False):
        why = result.stderr[-400:].decode("utf-8", "replace").strip() or "no message"
        if result.timed_out:
            why = "it took longer than 120s"
        return b"", False, f"git could not diff the workspace the agent left: {why}"
    return result.output, False, None


def _failed(exit_code: int | None, timed_out: bool, truncated: bool) -> bool:
    return not truncated and (exit_code != 0 or timed_out)
