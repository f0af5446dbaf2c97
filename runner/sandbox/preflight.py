"""The sandbox preflight's look inside an image: what the harness needs is there (``sh``,
coreutils ``timeout``, ``git``, ``python3``, ``find``, the agent user with uid 1000), no
setuid or setgid file is (nothing in a sandbox may raise its privileges), and no directory
of the image's environment (``runner.sandbox.instance_layer``) leads where a sandbox
writes; and which of the agent's commands its PATH lacks. Run in a started sandbox by
``DockerSandboxFactory.preflight``. Each answer is read only when it arrived whole
(``runner.sandbox.end_mark``): a cut answer would read as nothing missing."""

from __future__ import annotations

from collections.abc import Sequence

import docker

from runner.errors import SandboxError, UserError
from runner.sandbox import end_mark
from runner.sandbox.base import ExecRequest, ExecResult, Sandbox
from runner.sandbox.engine import API_ERRORS, exit_code
from runner.sandbox.instance_layer import WRITABLE

SETUID_SHOWN = 3
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


def check_harness(
    client: docker.APIClient, container: str, image: str, path: tuple[str, ...] = ()
) -> None:
    """One line (``UserError``) naming the image and what it lacks or has too much of."""
    script = HARNESS_CHECK + "; " + PATH_CHECK if path else HARNESS_CHECK
    result = _whole(client, container, image, ["sh", "-c", script, "sh", *path])
    lines = result.output.decode("utf-8", "replace").strip().splitlines()
    setuid = [line.removeprefix("setuid ") for line in lines if line.startswith("setuid ")]
    unsafe = [line for line in lines if line.startswith("a PATH directory ")]
    missing = [line for line in lines if not line.startswith("setuid ") and line not in unsafe]
    if result.exit_code != 0 and not missing:
        missing = ["a working sh"]
    problems = [f"lacks {', '.join(missing)}"] if missing else []
    if setuid:
        shown = ", ".join(setuid[:SETUID_SHOWN])
        more = " and more" if len(setuid) > SETUID_SHOWN else ""
        problems.append(f"has setuid/setgid files ({shown}{more})")
    problems += [f"has {line}, where a sandbox writes" for line in unsafe[:1]]
    if problems:
        raise UserError(
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
