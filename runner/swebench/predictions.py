"""SWE-bench predictions: one ``model_patch`` per ``instance_id`` from one model.

A predictions file is JSON Lines (or a JSON array, or the ``{instance_id: {...}}``
mapping some harnesses write) of objects with ``instance_id``,
``model_name_or_path`` and ``model_patch``. An instance the file does not name is
an empty patch (a miss, never an error); an id that is not an instance of the
suite is an error naming the file and the line, as is a second patch for one
instance. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from runner.bounded_input import excerpt
from runner.errors import UserError
from runner.swebench.rows import json_rows


@dataclass(frozen=True)
class Predictions:
    """One model's patches by instance id (absent: no patch)."""

    model: str  # model_name_or_path, when the file names one consistently
    patches: dict[str, str]


def parse_predictions(text: str, source: str, instances: Collection[str]) -> Predictions:
    """The predictions in ``text``, checked against the suite's instance ids."""
    rows = json_rows(text, source, "prediction")
    patches: dict[str, str] = {}
    where_of: dict[str, str] = {}
    models: set[str] = set()
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise UserError(f"{where}: a prediction must be a JSON object")
        instance_id = row.get("instance_id")
        if not isinstance(instance_id, str):
            raise UserError(f"{where}: field 'instance_id' is missing or not a string")
        if instance_id not in instances:
            raise UserError(
                f"{where}: instance_id {excerpt(instance_id)} is not an instance of this suite; "
                "remove the line or import the instance"
            )
        if instance_id in patches:
            raise UserError(
                f"{where}: a second prediction for {excerpt(instance_id)} (first at "
                f"{where_of[instance_id]}); keep one"
            )
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise UserError(f"{where}: field 'model_patch' must be a string (or null)")
        model = row.get("model_name_or_path")
        if isinstance(model, str) and model:
            models.add(model)
        patches[instance_id] = patch or ""
        where_of[instance_id] = where
    return Predictions(next(iter(models)) if len(models) == 1 else "", patches)
