"""Removing sandboxes a crashed process left behind, found by their labels.

A sandbox is left behind when its owner was killed (SIGKILL, OOM, a power cut)
before its ``finally`` ran. Its labels name the owner: ``pid`` (pid and process
start time) and ``host`` (boot and PID namespace, ``host_identity``). A reaper that
shares the owner's host identity removes it as soon as that process is gone; an
owner elsewhere (another machine, another container) cannot be checked from here,
so its sandboxes wait for their ``deadline`` label.

Containers go first (a network or volume in use cannot be removed), then the
model-only networks (``runner.sandbox.gateway_container``), then volumes, then the copy-free
workspace views whose owner is gone (``runner.sandbox.overlay.sweep``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import docker
import docker.errors

from runner.sandbox import overlay
from runner.sandbox.labels import LABEL_PREFIX, alive, host_identity


def owner_gone(labels: dict[str, str], here: str) -> bool:
    """Whether the labels name an owner on this host (``here``) that is no longer running."""
    host = labels.get(f"{LABEL_PREFIX}host", "")
    pid = labels.get(f"{LABEL_PREFIX}pid", "")
    return bool(here) and host == here and bool(pid) and not alive(pid)


DEADLINE = f"{LABEL_PREFIX}deadline"


def reap(
    client: docker.APIClient,
    *,
    dry_run: bool,
    include_live: bool = False,
    worker: str | None = None,
    past_deadline: bool = True,
) -> list[str]:
    """Remove deltarun containers, then networks, then volumes, whose owner on this host is
    gone, or (``past_deadline``) whose deadline has passed, or all (``include_live``);
    return what was done."""
    verdict = _Verdict(time.time(), host_identity(), include_live, past_deadline)
    filters: dict[str, object] = {"label": [DEADLINE]}
    if worker:
        filters["label"] = [DEADLINE, f"{LABEL_PREFIX}worker={worker}"]
    lines = _reap_containers(client, filters, verdict, dry_run)
    lines += _reap_networks(client, filters, verdict, dry_run)
    lines += _reap_volumes(client, filters, verdict, dry_run)
    # Copy-free workspace views carry no worker label: a reap scoped to one worker takes
    # only those whose owner is gone, never another worker's live ones.
    lines += overlay.sweep(dry_run=dry_run, include_live=include_live and not worker)
    return lines or ["nothing to remove"]


CONFLICT = 409  # the engine's answer while another remove of the same container runs


@dataclass(frozen=True)
class _Verdict:
    """Which labelled resources ``reap`` removes: those of an owner gone from this host
    (``here``), all with ``include_live``, else (``past_deadline``) those past ``now``."""

    now: float
    here: str
    include_live: bool
    past_deadline: bool

    def why(self, labels: dict[str, str]) -> str | None:
        """Why this resource goes (said after its name), or None to keep it."""
        if owner_gone(labels, self.here):
            return " (owner gone)"
        if self.include_live:
            return ""
        deadline = float(labels.get(DEADLINE, "0") or 0)
        return "" if self.past_deadline and deadline <= self.now else None


def _reap_containers(
    client: docker.APIClient, filters: dict[str, object], verdict: _Verdict, dry_run: bool
) -> list[str]:
    """Containers first: a network or volume still in use cannot be removed."""
    lines: list[str] = []
    for container in client.containers(all=True, filters=filters):
        labels = container.get("Labels") or {}
        reason = verdict.why(labels)
        if reason is None:
            continue
        name = container["Id"][:12]
        lines.append(
            f"{'would remove' if dry_run else 'removed'} container {name} "
            f"(job {labels.get(LABEL_PREFIX + 'job', '?')[:12]}){reason}"
        )
        if not dry_run:
            try:
                client.remove_container(container["Id"], force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != CONFLICT:  # another process is removing it already
                    raise
    return lines


def _reap_networks(
    client: docker.APIClient, filters: dict[str, object], verdict: _Verdict, dry_run: bool
) -> list[str]:
    """The model-only networks (``runner.sandbox.gateway_container``), once their
    containers went."""
    lines: list[str] = []
    for network in client.networks(filters=filters):
        if verdict.why(network.get("Labels") or {}) is None:
            continue
        lines.append(f"{'would remove' if dry_run else 'removed'} network {network['Name']}")
        if not dry_run:
            try:
                client.remove_network(network["Id"])
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                lines[-1] += " (in use; try again later)"
    return lines


def _reap_volumes(
    client: docker.APIClient, filters: dict[str, object], verdict: _Verdict, dry_run: bool
) -> list[str]:
    """The sandboxes' tmpfs volumes, last."""
    lines: list[str] = []
    volumes = (client.volumes(filters=filters) or {}).get("Volumes") or []
    for volume in volumes:
        if verdict.why(volume.get("Labels") or {}) is None:
            continue
        lines.append(f"{'would remove' if dry_run else 'removed'} volume {volume['Name']}")
        if not dry_run:
            try:
                client.remove_volume(volume["Name"], force=True)
            except docker.errors.APIError:
                lines[-1] += " (in use; try again later)"
    return lines


def reap_orphans(client: docker.APIClient, worker: str) -> list[str]:
    """Remove this worker's sandboxes whose owning process has died (same host, same name)."""
    lines: list[str] = []
    selector = [f"{LABEL_PREFIX}worker={worker}"]
    for container in client.containers(all=True, filters={"label": selector}):
        labels = container.get("Labels") or {}
        pid = labels.get(f"{LABEL_PREFIX}pid", "")
        if pid and alive(pid):
            continue
        try:
            client.remove_container(container["Id"], force=True, v=True)
            lines.append(f"removed orphaned container {container['Id'][:12]} (pid {pid} gone)")
        except docker.errors.APIError:
            pass
    for network in client.networks(filters={"label": selector}):
        pid = (network.get("Labels") or {}).get(f"{LABEL_PREFIX}pid", "")
        if pid and alive(pid):
            continue
        try:
            client.remove_network(network["Id"])
            lines.append(f"removed orphaned network {network['Name']}")
        except docker.errors.APIError:
            pass
    volumes = (client.volumes(filters={"label": selector}) or {}).get("Volumes") or []
    for volume in volumes:
        pid = (volume.get("Labels") or {}).get(f"{LABEL_PREFIX}pid", "")
        if pid and alive(pid):
            continue
        try:
            client.remove_volume(volume["Name"], force=True)
            lines.append(f"removed orphaned volume {volume['Name']}")
        except docker.errors.APIError:
            pass
    return lines + overlay.sweep()
