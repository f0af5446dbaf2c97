"""``deltarun view RUN --bundle DIR``: the viewer as static files that open from disk.

    DIR/index.html             the shell (open it in a browser; no server, no network)
    DIR/view.css, view.js      its style and script
    DIR/data/index.js          the matrix and the run page's data
    DIR/data/trial/<line>.js   one trial's detail, loaded by ``<script src>`` when shown

A ``file://`` page cannot fetch JSON, so each data file is a script calling ``dvData``;
the page's Content-Security-Policy allows scripts from its own folder only.

DIR is outside the run directory, or its ``view/`` folder (run.json's ``view_bundle``),
which a new run's report.html links to.
"""

from __future__ import annotations

from pathlib import Path

from runner.atomic import write_atomic
from runner.errors import UserError
from runner.paths import own_folder, writable
from runner.store.rundir import VIEW_BUNDLE
from runner.view.assets import data_script, static_files
from runner.view.source import RunSource


def write_bundle(source: RunSource, out: Path) -> int:
    """Write the bundle of ``source`` into ``out`` (new, empty, or an earlier bundle);
    returns the number of trials written."""
    root, place = source.path.resolve(), out.resolve()
    folder = str(source.meta.get("view_bundle") or VIEW_BUNDLE)
    if (place == root or root in place.parents) and place != (root / folder).resolve():
        raise UserError(
            f"{out}: inside the run directory; write the bundle elsewhere, or into "
            f"{source.path / folder} (where report.html links)"
        )
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "data" / "index.js").is_file():
        raise UserError(f"{out}: not empty and not a viewer bundle; give a new folder")
    own_folder(out.parent, out.name, what="deltarun writes the viewer")
    own_folder(out, "data/trial", what="deltarun writes the viewer's data")

    def put(relative: str, text: str) -> None:
        # A link a run directory ships where a page goes is refused, never written through.
        write_atomic(writable(out, relative, what="deltarun writes a viewer page"), text.encode())

    for name, text in static_files().items():
        put(name, text)
    index = source.index()
    run = source.run_page()
    put("data/index.js", data_script("index", 0, {"matrix": index, "run": run}))
    for key in [*index["trials"], *index["retried"]]:  # a retried error's record is audit
        line = int(key)
        put(f"data/trial/{line}.js", data_script("trial", line, source.trial(line)))
    return len(index["trials"])


def bundle_beside_report(run_dir: Path) -> list[str]:
    """After a report: the bundle in the run's ``view/`` folder that its report.html links
    (a run recorded before run.json named one has no link and gets none); the line to show.
    A bundle that cannot be written costs the user the link, never the report."""
    try:
        source = RunSource(run_dir)
        folder = str(source.meta.get("view_bundle") or "")
        if not folder:
            return []
        # run.json names the folder: held inside the run directory, a real folder (no link)
        count = write_bundle(source, own_folder(run_dir, folder, what="the viewer is written"))
    except (OSError, UserError) as exc:
        return [f"viewer: not written ({exc}); `deltarun view {run_dir}` serves the same pages"]
    return [f"viewer: {run_dir / folder / 'index.html'} ({count} trials)"]
