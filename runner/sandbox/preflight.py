"""The sandbox preflight's look inside an image: what the harness needs is there (``sh``,
coreutils ``timeout``, ``git``, ``python3``, ``find``, the agent user with uid 1000), no
setuid or setgid file is (nothing in a sandbox may raise its privileges), and no directory
of the image's environment (``runner.sandbox.instance_layer``) leads where a sandbox
writes; and which of the agent's commands its PATH lacks. Run in a started sandbox by
``DockerSandboxFactory.preflight``. Each answer is read only when it arrived whole
(``runner.sandbox.end_mark``): a cut answer would read as nothing missing. The answers
are kept per image ID (``runner.trees.kept``): the next run on this machine opens the
sandbox (the engine must still accept the limits) but walks no file of the image."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import docker

from runner.errors import SandboxError, UserError
from runner.sandbox import end_mark
from runner.sandbox.base import ExecRequest, ExecResult, Sandbox
from runner.sandbox.engine import API_ERRORS, exit_code
from runner.sandbox.instance_layer import WRITABLE
from runner.trees.kept import keep, kept_path, machine_lock, read_kept

SETUID_SHOWN = 3
_KEPT_MAX = 1 << 20  # a kept answer larger than this is asked again
# What the harness needs in an image, one line per thing missing, then "setuid <path>" for
# the first setuid/setgid files of the image's own filesystem (-xdev: not the tmpfs mounts).
HARNESS_CHECK = (
    "command -v timeout >/dev/null || echo 'coreutils timeout'; "
    "command -v git >/dev/null || echo git; "
    "command -v python3 >/dev/null || echo python3; "
    "command -v sh >/dev/null || echo sh; "
    "command -v find >/dev/null || echo find; "
    "[ \"$(id -u agent 2>/dev/null)\" = 1000 ] || echo 'an agent user with uid 1000'; "
    f"find / -xdev -perm /6000 -type f 2>/dev/null | head -n {SETUID_SHOWN + 1} "
    '| while read -r path; do echo "setuid $path"; done; true'
)
# Each directory of the image's environment, resolved inside the image (a link followed),
# must stay out of every place a sandbox writes: root runs from that PATH too.
_WRITABLE_CASE = "|".join(f"{w}|{w}/*" for w in WRITABLE)
PATH_CHECK = (
    'for d in "$@"; do r="$(readlink -f "$d" 2>/dev/null || echo "$d")"; '
    f'case "$r" in {_WRITABLE_CASE}) echo "a PATH directory $d leading to $r";; esac; done'
)


class StartedSandbox(Sandbox, Protocol):
    """What the checks need of a started Docker sandbox (``runner.sandbox.docker``): the
    engine's client and the container, for the check that runs as root."""

    client: docker.APIClient
    container: str

    @property
    def path(self) -> tuple[str, ...]: ...


def image_checks(
    sandbox: StartedSandbox, image: str, runtime: str | None, commands: Sequence[str]
) -> list[str]:
    """The harness check (``check_harness``), then those of ``commands`` the agent's PATH
    lacks (``missing_commands``), in ``sandbox``, a started sandbox of ``image`` under the
    OCI ``runtime``. Both answers depend only on the image's files (its ID), the runtime
    and the questions, so they are asked once per machine and kept (``runner.trees.kept``);
    a kept answer is judged as a fresh one, and one that does not read as an answer is
    asked again."""
    kept = kept_path(
        "preflight", sandbox.image_digest, runtime or "", HARNESS_CHECK, PATH_CHECK, LOOKUP,
        AGENT_PATH, json.dumps(sandbox.path), json.dumps(list(commands)),
    )  # fmt: skip
    with machine_lock(kept):
        answer = _read_answer(kept, commands)
        if answer is None:
            answer = _harness_answer(sandbox.client, sandbox.container, image, sandbox.path)
            if not _harness_problems(answer, image):
                answer.missing = missing_commands(sandbox, commands)
            keep(kept, json.dumps(dataclasses.asdict(answer)).encode())
    _refuse_on_problems(answer, image)
    return answer.missing


def check_harness(
    client: docker.APIClient, container: str, image: str, path: tuple[str, ...] = ()
) -> None:
    """One line (``UserError``) naming the image and what it lacks or has too much of."""
    _refuse_on_problems(_harness_answer(client, container, image, path), image)


@dataclasses.dataclass
class _Answer:
    """What the harness check printed and how it ended; the agent's commands it lacks."""

    exit_code: int | None
    output: str
    missing: list[str]


def _read_answer(kept: Path, commands: Sequence[str]) -> _Answer | None:
    """The answer kept at ``kept`` when it reads as one for ``commands``; None otherwise."""
    raw = read_kept(kept, _KEPT_MAX)
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != {"exit_code", "output", "missing"}:
        return None
    code, output, missing = value["exit_code"], value["output"], value["missing"]
    if not (code is None or type(code) is int) or not isinstance(output, str):
        return None
    if not isinstance(missing, list) or not all(name in commands for name in missing):
        return None
    return _Answer(code, output, missing)


def _harness_answer(
    client: docker.APIClient, container: str, image: str, path: tuple[str, ...]
) -> _Answer:
    """The harness check run in ``container`` (no commands looked up yet)."""
    script = HARNESS_CHECK + "; " + PATH_CHECK if path else HARNESS_CHECK
    result = _whole(client, container, image, ["sh", "-c", script, "sh", *path])
    return _Answer(result.exit_code, result.output.decode("utf-8", "replace"), [])


def _refuse_on_problems(answer: _Answer, image: str) -> None:
    problems = _harness_problems(answer, image)
    if problems:
        raise UserError(problems)


def _harness_problems(answer: _Answer, image: str) -> str | None:
    """The one line naming what the image lacks or has too much of; None when nothing."""
    lines = answer.output.strip().splitlines()
    setuid = [line.removeprefix("setuid ") for line in lines if line.startswith("setuid ")]
    unsafe = [line for line in lines if line.startswith("a PATH directory ")]
    missing = [line for line in lines if not line.startswith("setuid ") and line not in unsafe]
    if answer.exit_code != 0 and not missing:
        missing = ["a working sh"]
    problems = [f"lacks {', '.join(missing)}"] if missing else []
    if setuid:
        shown = ", ".join(setuid[:SETUID_SHOWN])
        more = " and more" if len(setuid) > SETUID_SHOWN else ""
        problems.append(f"has setuid/setgid files ({shown}{more})")
    problems += [f"has {line}, where a sandbox writes" for line in unsafe[:1]]
    if not problems:
        return None
    return (
        f"sandbox image {image!r} {'; '.join(problems)}; build it from "
        "worker_images/python (`make images`), which has the harness's tools and strips "
        "setuid bits, or fix the image"
    )


def _whole(client: docker.APIClient, container: str, image: str, argv: list[str]) -> ExecResult:
    """``argv`` run as the container's user (root), straight on the engine: ``Sandbox.run``
    needs the ``timeout`` this check looks for. Run again when the engine cut its output
    short (``end_mark.until_whole``)."""
    request = ExecRequest(argv=argv, end_mark=True)

    def attempt() -> ExecResult:
        mark = end_mark.new_mark()
        try:
            exec_id = client.exec_create(container, end_mark.argv_of(request, mark))["Id"]
            out = client.exec_start(exec_id)
            code = exit_code(client, exec_id)
        except API_ERRORS as exc:
            raise UserError(
                f"sandbox image {image!r} cannot run the harness ({exc}); it needs sh, "
                "coreutils timeout, git, python3 and an agent user with uid 1000: build it "
                "from worker_images/python"
            ) from exc
        killed = end_mark.may_lack_mark(code, False)
        got = end_mark.unmarked(request, mark, out or b"", False, b"", killed=killed)
        return ExecResult(code, got.output, got.truncated, False, cut_short=got.cut_short)

    return end_mark.until_whole(attempt, f"image {image!r}'s harness check")


# Prints each argument that is not a command on PATH (the agent's own PATH).
LOOKUP = 'for c in "$@"; do command -v "$c" >/dev/null 2>&1 || echo "$c"; done'
AGENT_PATH = "/usr/local/bin:/usr/bin:/bin"  # the agent's PATH (runner.agents.interface.BASE_ENV)


def missing_commands(sandbox: Sandbox, commands: Sequence[str]) -> list[str]:
    """Those of ``commands`` the agent's PATH does not find in the sandbox's image. A
    lookup that did not end (a signal, a timeout) is a ``SandboxError``: a part of its
    answer would leave out what is missing."""
    if not commands:
        return []
    found = end_mark.run_whole(
        sandbox,
        ExecRequest(
            argv=["sh", "-c", LOOKUP, "sh", *commands], env={"PATH": AGENT_PATH}, timeout_s=60
        ),
        "the lookup of the agent's commands",
    )
    if found.exit_code != 0 or found.timed_out:
        raise SandboxError(f"the lookup of the agent's commands ended {found.exit_code}")
    return found.output.decode("utf-8", "replace").split()
