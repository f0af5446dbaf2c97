"""``deltarun worker --log-json``: one JSON object per log line, for log shippers.

Trial events carry their fields (``event``: trial_started, trial_finished,
trial_skipped; run, job, task, arm, repeat, worker; outcome and wall time when
finished) under the record's ``fields`` extra; every other line is its message.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        return json.dumps(line, sort_keys=True, default=str)


def use_json_logs() -> None:
    """Every handler of the root logger writes JSON lines."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter())
