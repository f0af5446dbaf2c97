"""Notes on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional


class NoteStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> List[Dict[str, str]]:
        if not self.path.exists():
            return []
        return json.loads(self.path.read_text(encoding="utf-8"))

    def add(self, text: str, tag: Optional[str] = None) -> None:
        notes = self.load()
        notes.append({"text": text, "tag": tag or ""})
        self.path.write_text(json.dumps(notes, indent=2), encoding="utf-8")
