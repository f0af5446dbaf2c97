"""``deltarun view RUN --bundle DIR``: the viewer as static files that open from disk.

    DIR/index.html             the shell (open it in a browser; no server, no network)
    DIR/view.css, view.js      its style and script
    DIR/data/index.js          the matrix and the run page's data
    DIR/data/trial/<line>.js   one trial's detail, loaded by ``<script src>`` when shown

A ``file://`` page cannot fetch JSON, so each data file is a script calling ``dvData``;
the page's Content-Security-Policy allows scripts from its own folder only.
"""

from __future__ import annotations

from pathlib import Path

from runner.errors import UserError
from runner.view.assets import data_script, static_files
from runner.view.source import RunSource


def write_bundle(source: RunSource, out: Path) -> int:
    """Write the bundle of ``source`` into ``out`` (new, empty, or an earlier bundle);
    returns the number of trials written."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "data" / "index.js").is_file():
        raise UserError(f"{out}: not empty and not a viewer bundle; give a new folder")
    if out.resolve() == source.path.resolve() or source.path.resolve() in out.resolve().parents:
        raise UserError(f"{out}: inside the run directory; write the bundle elsewhere")
    trials_dir = out / "data" / "trial"
    trials_dir.mkdir(parents=True, exist_ok=True)
    for name, text in static_files().items():
        (out / name).write_text(text, encoding="utf-8")
    index = source.index()
    run = source.run_page()
    (out / "data" / "index.js").write_text(
        data_script("index", 0, {"matrix": index, "run": run}), encoding="ascii"
    )
    for key in index["trials"]:
        line = int(key)
        detail = source.trial(line)
        (trials_dir / f"{line}.js").write_text(data_script("trial", line, detail), encoding="ascii")
    return len(index["trials"])
