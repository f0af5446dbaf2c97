"""The file formats whose JSON Schema ``deltarun schema`` prints, for editors.

Each schema is derived from the model that reads the file, so it cannot drift from it:
controls.yaml (``config.model.Controls``), a line of tasks.jsonl and a record of
trials.jsonl (``runner.records``), report.json (``report.schema.ReportJSON``), and the steps
of an installed agent's trajectory (``runner.agents.installed.kind.Step``).
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter

from runner.agents.installed.kind import Step
from runner.config.controls import Controls
from runner.errors import UsageError
from runner.records import AnswerTask, RepoTask, Trial
from runner.report.schema import ReportJSON

FORMATS = {
    "controls": "controls.yaml: suite pin, runtime, tools, arms",
    "task": "one line of tasks.jsonl (a repository task or an answer task)",
    "trial": "one record of trials.jsonl",
    "report": "report.json",
    "trajectory": "a trial's steps (the record's transcript of an installed agent)",
}


def listing() -> list[str]:
    """One line per format, then how to print one."""
    return [f"{name:10} {about}" for name, about in FORMATS.items()] + [
        "print one: deltarun schema NAME"
    ]


def json_schema(name: str) -> str:
    """The JSON Schema of format ``name`` (a usage error for an unknown name)."""
    models: dict[str, TypeAdapter[object]] = {
        "controls": TypeAdapter(Controls),
        "task": TypeAdapter(RepoTask | AnswerTask),
        "trial": TypeAdapter(Trial),
        "report": TypeAdapter(ReportJSON),
        "trajectory": TypeAdapter(list[Step]),
    }
    if name not in models:
        raise UsageError(f"unknown schema {name!r}; choose one of {', '.join(models)}")
    return json.dumps(models[name].json_schema(by_alias=True))
