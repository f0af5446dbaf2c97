"""What a sandbox was given, as the engine reports it: the limits a trial really ran under.

The spec says what the harness asked for; a record names what the engine applied
(``docker inspect``'s ``HostConfig``), so a worker of another build, an engine
that drops a flag or a runtime default that differs shows in the record and fails
the checklist's "same limits" row (``runner.report.checklist``). Pure: the Docker
sandbox inspects its container and hands ``HostConfig`` here; the scripted sandbox
reports its spec.

======================  =============================================
key                     from ``HostConfig``
======================  =============================================
``memory_bytes``        ``Memory``
``nano_cpus``           ``NanoCpus``
``pids``                ``PidsLimit``
``nofile``              ``Ulimits`` ``nofile`` (soft limit)
``oci_runtime``         ``Runtime`` (the engine's default named, e.g. ``runc``)
``network``             ``none``, or ``model-only`` (a gateway's network)
``read_only``           ``ReadonlyRootfs``
``workspace_bytes``     the size the workspace volume was created with
======================  =============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.sandbox.base import SandboxSpec

DEFAULT_RUNTIME = "runc"  # what an engine names when no runtime was asked for


def applied_of(host_config: Mapping[str, Any], workspace_bytes: int) -> dict[str, Any]:
    """The applied limits from a container's ``HostConfig`` and its workspace volume."""
    nofile = next(
        (u.get("Soft") for u in host_config.get("Ulimits") or () if u.get("Name") == "nofile"),
        None,
    )
    network = host_config.get("NetworkMode") or "none"
    return {
        "memory_bytes": host_config.get("Memory"),
        "nano_cpus": host_config.get("NanoCpus"),
        "pids": host_config.get("PidsLimit"),
        "nofile": nofile,
        "oci_runtime": host_config.get("Runtime") or DEFAULT_RUNTIME,
        "network": "none" if network == "none" else "model-only",
        "read_only": bool(host_config.get("ReadonlyRootfs")),
        "workspace_bytes": workspace_bytes,
    }


def applied_of_spec(spec: SandboxSpec) -> dict[str, Any]:
    """What an engine that applies every flag reports for ``spec`` (the scripted sandbox)."""
    limits = spec.limits
    return {
        "memory_bytes": limits.memory_bytes,
        "nano_cpus": limits.nano_cpus,
        "pids": limits.pids,
        "nofile": limits.nofile,
        "oci_runtime": spec.oci_runtime or DEFAULT_RUNTIME,
        "network": "none" if spec.model_access is None else "model-only",
        "read_only": True,
        "workspace_bytes": limits.workspace_bytes,
    }
