"""The step containers of a classic build (``POST /build``): which one the build log names,
and the cap on its processes.

The classic builder runs each ``RUN`` in a container of its own and gives it no process
limit: the build API has memory and CPU parameters and no pids one, and ``ulimit nproc``
does not bind root, whom the kernel exempts. A suite's Dockerfile is hostile until proven
otherwise, and one ``RUN`` step could fork until the machine's process table is full; the
engine, Redis and every shell on the machine would then fail to start a process.

So each step container gets a process cap (``PidsLimit``, the engine's update of a
container) as soon as the build log names it (`` ---> Running in <id>``, a line
``runner.sandbox.build_log`` checks with the engine before it is believed). The engine prints
that line and starts the step at once, so what the step forks in the instant before the
cap lands is bounded by its memory limit only; every fork past the cap fails.
"""

from __future__ import annotations

import re
from typing import Any

import docker.errors

DEFAULT_BUILD_PIDS = 4096
_RUNNING = re.compile(r"---> Running in ([0-9a-f]{12,64})\b")


def running_step(event: Any) -> str | None:
    """The step container an event of the build stream names as started, if it names one."""
    text = event.get("stream") if isinstance(event, dict) else None
    if not isinstance(text, str):
        return None
    found = _RUNNING.search(text)
    return found.group(1) if found else None


def cap_pids(client: Any, step: str, pids: int) -> None:
    """At most ``pids`` processes (threads included) in build step container ``step``, from
    now on. A step that ended already needs no cap (the log is read behind the build, and
    the engine refuses to update a container it is removing); a refusal for a step still
    running raises the engine's ``docker.errors.APIError``."""
    # docker-py's update_container predates PidsLimit, so the request is made as it makes it.
    url = client._url("/containers/{0}/update", step)
    response = client._post_json(url, data={"PidsLimit": pids})
    try:
        client._raise_for_status(response)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError:
        if _running(client, step):
            raise


def _running(client: Any, step: str) -> bool:
    try:
        state = client.inspect_container(step).get("State") or {}
    except docker.errors.NotFound:
        return False
    return bool(state.get("Running"))
