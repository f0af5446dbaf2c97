"""Reading layers from JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, Union

from layerconf.merge import merge_all


def load_layers(paths: Iterable[Union[str, Path]]) -> Dict[str, Any]:
    """Read each JSON object file and merge them in order; missing files are skipped."""
    layers = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a configuration layer must be a JSON object")
        layers.append(data)
    return merge_all(*layers)
