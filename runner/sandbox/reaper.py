"""Removing sandboxes a crashed process left behind, found by their labels.

Containers go first (a network or volume in use cannot be removed), then the
model-only networks (``runner.sandbox.model_gateway``), then volumes.
"""

from __future__ import annotations

import os
import time

import docker
import docker.errors

from runner.sandbox.docker import LABEL_PREFIX, process_identity


def reap(
    client: docker.APIClient,
    *,
    dry_run: bool,
    include_live: bool = False,
    worker: str | None = None,
) -> list[str]:
    """Remove deltarun containers, then networks, then volumes, past their deadline;
    return what was done."""
    now = time.time()
    lines: list[str] = []
    label = f"{LABEL_PREFIX}deadline"
    filters: dict[str, object] = {"label": [label]}
    if worker:
        filters["label"] = [label, f"{LABEL_PREFIX}worker={worker}"]
    for container in client.containers(all=True, filters=filters):
        labels = container.get("Labels") or {}
        deadline = float(labels.get(label, "0") or 0)
        if deadline > now and not include_live:
            continue
        name = container["Id"][:12]
        lines.append(
            f"{'would remove' if dry_run else 'removed'} container {name} "
            f"(job {labels.get(LABEL_PREFIX + 'job', '?')[:12]})"
        )
        if not dry_run:
            try:
                client.remove_container(container["Id"], force=True, v=True)
            except docker.errors.NotFound:
                pass
    for network in client.networks(filters=filters):
        labels = network.get("Labels") or {}
        deadline = float(labels.get(label, "0") or 0)
        if deadline > now and not include_live:
            continue
        lines.append(f"{'would remove' if dry_run else 'removed'} network {network['Name']}")
        if not dry_run:
            try:
                client.remove_network(network["Id"])
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                lines[-1] += " (in use; try again later)"
    volumes = (client.volumes(filters=filters) or {}).get("Volumes") or []
    for volume in volumes:
        labels = volume.get("Labels") or {}
        deadline = float(labels.get(label, "0") or 0)
        if deadline > now and not include_live:
            continue
        lines.append(f"{'would remove' if dry_run else 'removed'} volume {volume['Name']}")
        if not dry_run:
            try:
                client.remove_volume(volume["Name"], force=True)
            except docker.errors.APIError:
                lines[-1] += " (in use; try again later)"
    if not lines:
        lines.append("nothing to remove")
    return lines


def _alive(identity: str) -> bool:
    """Is the process named by a ``pid:start-time`` label still the one that made the sandbox?"""
    pid_text, _, start = identity.partition(":")
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return process_identity(int(pid_text)) == identity or not start or start == "0"


def reap_orphans(client: docker.APIClient, worker: str) -> list[str]:
    """Remove this worker's sandboxes whose owning process has died (same host, same name)."""
    lines: list[str] = []
    selector = [f"{LABEL_PREFIX}worker={worker}"]
    for container in client.containers(all=True, filters={"label": selector}):
        labels = container.get("Labels") or {}
        pid = labels.get(f"{LABEL_PREFIX}pid", "")
        if pid and _alive(pid):
            continue
        try:
            client.remove_container(container["Id"], force=True, v=True)
            lines.append(f"removed orphaned container {container['Id'][:12]} (pid {pid} gone)")
        except docker.errors.APIError:
            pass
    for network in client.networks(filters={"label": selector}):
        pid = (network.get("Labels") or {}).get(f"{LABEL_PREFIX}pid", "")
        if pid and _alive(pid):
            continue
        try:
            client.remove_network(network["Id"])
            lines.append(f"removed orphaned network {network['Name']}")
        except docker.errors.APIError:
            pass
    volumes = (client.volumes(filters={"label": selector}) or {}).get("Volumes") or []
    for volume in volumes:
        pid = (volume.get("Labels") or {}).get(f"{LABEL_PREFIX}pid", "")
        if pid and _alive(pid):
            continue
        try:
            client.remove_volume(volume["Name"], force=True)
            lines.append(f"removed orphaned volume {volume['Name']}")
        except docker.errors.APIError:
            pass
    return lines
