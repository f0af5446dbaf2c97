"""The ``view`` command: a run's trials in a browser, served or written as static files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from typer import Option

from runner.cli.common import RunDirArg, app, say


@app.command()
def view(
    run_dir: RunDirArg,
    bundle: Annotated[
        Path | None,
        Option(
            "--bundle",
            help="Write the pages as static files into this folder and exit (outside the run, "
            "or RUN_DIR/view, where a new run's report.html links)",
        ),
    ] = None,
    host: Annotated[
        str, Option("--host", help="Address to serve on; any but loopback needs the printed token")
    ] = "127.0.0.1",
    port: Annotated[int, Option("--port", min=0, max=65535, help="Port (0: any free)")] = 8765,
) -> None:
    """Browse a run: the task × arm matrix, one task's arms side by side (patch, verify
    log, steps), the report's headline and checklist. Serves on 127.0.0.1 until Ctrl-C,
    or with --bundle writes the same pages as files that open from disk."""
    from runner.view.source import RunSource

    source = RunSource(run_dir)
    if bundle is not None:
        from runner.view.static_site import write_bundle

        count = write_bundle(source, bundle)
        say([f"bundle: {bundle / 'index.html'} ({count} trials)"], markup=False)
        return
    from runner.view.serve import open_server

    server = open_server(source, host, port)
    say([f"serving {run_dir} at {server.url} (Ctrl-C to stop)"], markup=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
