"""What the Python CLIs (aider, mini-swe-agent) share: they are installed as a flat site
directory of wheels built for the image's own Python (``INSTALL_DIR/site``), and started by
that Python with the site directory first on ``sys.path`` (no venv, no pip in the image: a
Python under a root-only home cannot run as another uid)."""

from __future__ import annotations

from runner.agents.installed.kind import INSTALL_DIR

SITE = f"{INSTALL_DIR}/site"


def launcher(module: str, function: str) -> tuple[str, ...]:
    """argv that runs ``module:function`` (a console-script entry point) with the image's
    python3; the CLI's own arguments follow."""
    code = (
        f"import sys; sys.path.insert(0, {SITE!r}); sys.argv[0] = {module!r}; "
        f"from {module} import {function} as main; sys.exit(main())"
    )
    return ("python3", "-c", code)
