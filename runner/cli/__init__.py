"""The ``deltarun`` command line: arguments, progress and exit codes, nothing else.

Commands by concern: ``suites`` (seal, build, init, validate, import swebench,
schema), ``runs`` (run, status, report, compare, replay, export), ``fleet``
(worker, gc); ``common`` holds what they share (the broker's options as one group, made
by ``groups``), ``help`` the app's help drawn as paragraphs. Each command parses its
arguments, calls the code that does the work (``runner.run.service`` for a run;
the others' in ``suite.workflows``, ``run.validate``, ``export.kit_steps``,
``swebench.workflow``, ``run.report_files`` and ``run.replay_steps``; ``schemas`` here) and prints
the lines it hands back. Every deliberate error is a
``DeltarunError``: printed as one line on stderr, no traceback, with its exit code
(1 user error, 2 usage, 3 digest or protocol mismatch, 4 no control arm, 130
interrupted).
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import typer

from runner.bounded_input import one_line
from runner.cli.common import app, err
from runner.errors import DeltarunError, UserError

# Imported for their commands, which register on ``app`` in this order (that of --help).
COMMAND_MODULES = tuple(
    importlib.import_module(f"runner.cli.{name}")
    for name in ("suites", "runs", "gate", "fleet", "view")
)


def main() -> None:
    """Entry point: one line and an exit code for every deliberate error."""
    try:
        code = app(standalone_mode=False)
    except DeltarunError as exc:
        _fail(f"error: {exc}", exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except OSError as exc:  # a file or device problem the code did not foresee: still one line
        _fail(f"error: {exc}", 1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort as exc:
        _fail(str(exc), 2)
    except (RecursionError, MemoryError) as exc:
        # Last resort (every parse of input is bounded before it allocates): a constant
        # message, since what failed may have been the memory to word another one.
        kind = type(exc).__name__
        del exc
        _fail(f"error: the input is nested too deeply or too large to process ({kind})", 1)
    except Exception as exc:
        _click_exit(exc)
        if isinstance(exc, ValueError | OverflowError):  # last resort: a parse the code missed
            _fail(f"error: cannot process the input ({type(exc).__name__}: {exc})", 1)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> NoReturn:
    """``deltarun: <message>`` as one line on stderr, then exit ``code``: whatever the message
    quotes, at most ``MAX_MESSAGE`` printable characters (``bounded_input.one_line``)."""
    err.print(one_line(f"deltarun: {message}"), highlight=False, markup=False, emoji=False)
    sys.exit(code)


def _click_exit(exc: Exception) -> None:
    """Exit for the command-line parser's own exceptions (click's, or the copy typer
    vendors): a usage error is one line and exit 2; returns for anything else."""
    for module in ("click.exceptions", "typer._click.exceptions"):
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        if isinstance(exc, found.UsageError):
            command = exc.ctx.command_path if exc.ctx is not None else "deltarun"
            _fail(f"{exc.format_message()} (see `{command} --help`)", 2)
        if isinstance(exc, found.ClickException):
            _fail(f"error: {exc.format_message()}", exc.exit_code)
        exit_class = getattr(found, "Exit", None)  # typer's vendored copy has none
        if exit_class is not None and isinstance(exc, exit_class):
            sys.exit(exc.exit_code)


__all__ = ["UserError", "app", "main"]
