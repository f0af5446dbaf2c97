"""The sandbox preflight's look inside an image: what the harness needs is there (``sh``,
coreutils ``timeout``, ``git``, ``python3``, ``find``, the agent user with uid 1000), no
setuid or setgid file is (nothing in a sandbox may raise its privileges), and no directory
of the image's environment (``runner.sandbox.instance_layer``) leads where a sandbox
writes. Run in a started sandbox by ``DockerSandboxFactory.preflight``."""

from __future__ import annotations

import docker

from runner.errors import UserError
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
    argv = ["sh", "-c", script, "sh", *path]
    try:
        exec_id = client.exec_create(container, argv)["Id"]
        out = client.exec_start(exec_id)
        code = exit_code(client, exec_id)
    except API_ERRORS as exc:
        raise UserError(
            f"sandbox image {image!r} cannot run the harness ({exc}); it needs sh, "
            "coreutils timeout, git, python3 and an agent user with uid 1000: build it from "
            "worker_images/python"
        ) from exc
    lines = out.decode("utf-8", "replace").strip().splitlines() if out else []
    setuid = [line.removeprefix("setuid ") for line in lines if line.startswith("setuid ")]
    unsafe = [line for line in lines if line.startswith("a PATH directory ")]
    missing = [line for line in lines if not line.startswith("setuid ") and line not in unsafe]
    if code != 0 and not missing:
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
