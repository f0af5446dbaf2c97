"""Loading a user metrics module pinned by SHA-256 in the controls.

``metrics: {module: metrics.py, sha256: ..., functions: [...]}``: the module is
executed only when the bytes match the pin (``DigestMismatch``, exit 3,
otherwise); each listed function becomes a metric next to the built-ins,
called as ``f(answer, task, wall_s) -> bool``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path

from runner.bounded_input import read_capped
from runner.config.controls import MetricsSpec
from runner.errors import DigestMismatch, UserError
from runner.grading.metrics import BUILTIN, Metric
from runner.hashing import sha256_bytes


def load_metrics(
    spec: MetricsSpec | None, source: bytes | None, origin: str
) -> Mapping[str, Metric]:
    """The metric registry: built-ins plus the pinned module's functions."""
    if spec is None:
        return BUILTIN
    if source is None:
        raise UserError(f"{origin}: metrics module not found; fix metrics.module in controls")
    actual = sha256_bytes(source)
    if not spec.sha256:
        raise UserError(
            f"{origin}: metrics.sha256 is empty; pin the module with 'sha256: {actual}'"
        )
    if actual != spec.sha256:
        raise DigestMismatch(
            f"{origin}: digest mismatch: controls pin {spec.sha256}, the module has {actual}; "
            "restore the module or update the pin (which changes the protocol hash)"
        )
    module = types.ModuleType("deltarun_user_metrics")
    module.__file__ = origin
    try:
        exec(compile(source, origin, "exec"), module.__dict__)  # pinned user code, by design
    except Exception as exc:
        raise UserError(f"{origin}: the metrics module failed to load ({exc})") from exc
    registry: dict[str, Metric] = dict(BUILTIN)
    for name in spec.functions:
        function = getattr(module, name, None)
        if not callable(function):
            raise UserError(f"{origin}: metrics.functions names {name!r}, which it does not define")
        registry[name] = function
    return registry


MODULE_MAX_BYTES = 1 << 20
"""The largest metrics module read: a few functions; compiling is bounded by the size."""


def read_module(path: Path | None) -> tuple[bytes | None, str]:
    """The module's bytes (None when absent) and its path: ``LoadedControls.metrics_path``,
    which holds ``metrics.module`` inside the controls' folder."""
    if path is None:
        return None, ""
    try:
        return read_capped(path, MODULE_MAX_BYTES, "a metrics module"), str(path)
    except OSError:
        return None, str(path)
