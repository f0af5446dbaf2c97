"""Seed 004's ``metrics.py`` and ``replay.sh``: read, never run.

deltarun's report computes the seed's summary itself, from records with the
seed's ``Trial`` fields: ``n``, ``passes``, ``pass_rate``, ``wilson95`` (each
rate's Wilson 95% interval), ``timeout_rate``, ``tool_violation_rate``,
``tokens_per_pass``, ``wall_s_per_task`` and ``retries_mean``. So ``metrics.py``
is read as source (``ast``, no import): a ``Trial`` field or a summary key the
report does not have is named in a warning, as is a function beyond the seed's
two. ``replay.sh`` is deltarun's ``run`` + ``replay`` (and ``export`` writes a
kit with its own ``replay.sh``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from runner.errors import UserError
from runner.records import Trial
from runner.seedkits.fields import Warn, read_text

SUMMARY = (
    "n", "passes", "pass_rate", "wilson95", "timeout_rate", "tool_violation_rate",
    "tokens_per_pass", "wall_s_per_task", "retries_mean",
)  # fmt: skip
SEED_NAMES = ("Trial", "wilson_interval", "summarize")


def check_metrics_py(path: Path, warn: Warn) -> None:
    """Warnings for what of ``metrics.py`` deltarun's report does not compute."""
    if not path.is_file():
        warn(
            f"warning: {path}: missing; deltarun's report computes the seed's summary "
            f"({', '.join(SUMMARY)}) without it"
        )
        return
    source = read_text(path, "")
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid Python ({exc.msg}); fix it") from exc
    unknown: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Trial":
            unknown += [f"Trial.{f}" for f in _fields(node) if f not in Trial.model_fields]
        elif isinstance(node, ast.FunctionDef) and node.name == "summarize":
            unknown += [f"summarize()[{k!r}]" for k in _returned_keys(node) if k not in SUMMARY]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name not in SEED_NAMES:
            unknown.append(f"{node.name}()")
    if unknown:
        warn(
            f"warning: {path}: {', '.join(unknown[:6])}: not in deltarun's report, which "
            f"computes {', '.join(SUMMARY)} itself (the module is not executed)"
        )
    else:
        warn(
            f"warning: {path}: not executed; deltarun's report computes the same summary "
            "(Wilson 95% intervals, timeout and tool-violation rates, tokens per pass, wall s)"
        )


def _fields(node: ast.ClassDef) -> list[str]:
    return [
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    ]


def _returned_keys(node: ast.FunctionDef) -> list[str]:
    keys: list[str] = []
    for item in ast.walk(node):
        if isinstance(item, ast.Return) and isinstance(item.value, ast.Dict):
            keys += [
                k.value
                for k in item.value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
    return keys


def note_replay(kit: Path, warn: Warn) -> None:
    """One line on ``replay.sh`` (and the harness scripts it calls, when present)."""
    present = [name for name in ("replay.sh", "harness.py", "report.py") if (kit / name).is_file()]
    shown = ", ".join(present) if present else "replay.sh (missing)"
    warn(
        f"warning: {kit}: {shown}: not run; deltarun is the harness: `deltarun run` writes "
        "the ledger and report, `deltarun replay RUN` rebuilds the report byte for byte, "
        "`deltarun export RUN --kit DIR` writes a kit with its own replay.sh"
    )
