"""What the commands of the ``deltarun`` command line share: the app, the two consoles,
the options several commands take (each declared here once; the broker's as one
``BrokerFlags`` group), and the drawing of a run's ``Events``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from runner.bounded_input import terminal_text
from runner.cli.groups import OptionGroup
from runner.cli.help import ParagraphHelp

if TYPE_CHECKING:
    from runner.distributed.credentials import Broker
    from runner.executors.contract import PreparedRun
    from runner.records import Trial
    from runner.run.recording import Recording

app = typer.Typer(
    cls=ParagraphHelp,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Run coding agents on sealed suites in Docker sandboxes; report the delta vs a control.",
)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def tell(line: str) -> None:
    """One line on stderr as written: foreign text in it (a test id's ``[param]``, a
    build's colours, a ``:name:``) is neither markup, an emoji code nor an escape
    (``bounded_input.terminal_text``)."""
    err.print(terminal_text(line), highlight=False, markup=False, emoji=False)


def _print_version(value: bool) -> None:
    if value:
        from runner import __version__
        from runner.run.scoring_code import scoring_sha256

        print(f"deltarun {__version__}\nscoring sha256 {scoring_sha256()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Run coding agents on sealed suites in Docker sandboxes; report the delta vs a control."""


Target = Annotated[Path, typer.Argument(help="A suite directory, tasks.jsonl or controls.yaml")]
RunDirArg = Annotated[Path, typer.Argument(help="Run directory")]
Parallel = Annotated[int, typer.Option("-j", "--parallel", min=1, help="Trials at once")]
VisibilityTimeout = Annotated[
    int, typer.Option("--visibility-timeout", help="Seconds before Redis redelivers")
]


@dataclass(frozen=True)
class BrokerFlags(OptionGroup):
    """The broker options of every command that can reach Redis (run, validate, status,
    worker, gc): a parameter ``broker: BrokerFlags`` of a command under ``takes_groups``
    (runner/distributed/credentials.py says where each value is taken from)."""

    url: Annotated[
        str | None,
        typer.Option(
            "--broker",
            help="Redis URL (redis:// or rediss:// for TLS); default $DELTARUN_BROKER_URL. "
            "A password here shows in ps: use --broker-file",
        ),
    ] = None
    file: Annotated[
        Path | None,
        typer.Option("--broker-file", help="File whose first line is the Redis URL (mode 0600)"),
    ] = None
    ca: Annotated[
        Path | None,
        typer.Option(
            "--broker-ca", help="CA (PEM) of Redis's TLS certificate [$DELTARUN_BROKER_CA]"
        ),
    ] = None
    cert: Annotated[
        Path | None,
        typer.Option("--broker-cert", help="Client certificate (PEM) [$DELTARUN_BROKER_CERT]"),
    ] = None
    key: Annotated[
        Path | None,
        typer.Option("--broker-key", help="The client certificate's key [$DELTARUN_BROKER_KEY]"),
    ] = None

    @property
    def named(self) -> bool:
        """Whether --broker or --broker-file was given (the environment aside)."""
        return self.url is not None or self.file is not None

    def find(self, required: bool = False) -> Broker | None:
        """The broker these options (or $DELTARUN_BROKER_URL) name, reached once, or None
        (``runner.run.service.find_broker``)."""
        from runner.distributed.credentials import BrokerOptions
        from runner.run.service import find_broker

        options = BrokerOptions(self.url, self.file, self.ca, self.cert, self.key)
        return find_broker(options, os.environ, Lines(), required=required)


# The job key of the commands that sign jobs or check them (run, validate, worker).
JobKeyFile = Annotated[
    Path | None,
    typer.Option(
        "--job-key-file",
        help="Key that signs jobs and records; default $DELTARUN_JOB_KEY, "
        "$DELTARUN_JOB_KEY_FILE, else ~/.config/deltarun/job.key (made on first use)",
    ),
]


def say(lines: Iterable[str], markup: bool = False) -> None:
    """Lines on stdout, each as it comes, as written (``tell``)."""
    for line in lines:
        out.print(terminal_text(line), highlight=False, markup=markup, emoji=False)


class Shown:
    """The run's ``Events`` on the terminal: a progress bar on a tty, one line per record
    otherwise; a context manager that stops the bar."""

    def __init__(self) -> None:
        self.tty = err.is_terminal
        columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.progress = Progress(
            TextColumn("passes {task.description}"), *columns, console=err, disable=not self.tty
        )
        self.bar: TaskID | None = None
        self.arms: list[str] = []

    def __enter__(self) -> Shown:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def note(self, line: str) -> None:
        self.progress.console.print(terminal_text(line), highlight=False, markup=False, emoji=False)

    def started(self, prepared: PreparedRun, recording: Recording, total: int) -> None:
        from runner.run.recording import describe

        self.arms = list(prepared.meta.arms)
        self.progress.start()
        passes = describe(self.arms, recording)
        self.bar = self.progress.add_task(passes, total=total, completed=recording.recorded)

    def recorded(self, trial: Trial, recording: Recording, total: int) -> None:
        from runner.run.recording import describe

        if self.bar is not None:
            self.progress.update(self.bar, advance=1, description=describe(self.arms, recording))
        if not self.tty:
            extra = f" ({trial.error})" if trial.error else ""
            tell(
                f"[{recording.recorded}/{total}] {trial.arm} {trial.task_id}: "
                f"{trial.outcome.value} {trial.wall_s:.1f}s{extra}"
            )

    def setup_warning(self, text: str) -> None:
        self.note(f"setup warning: {text}")


class Lines:
    """Notes as plain lines on stderr (commands without a progress bar)."""

    def note(self, line: str) -> None:
        tell(line)


def job_key_of(option: Path | None) -> bytes:
    """The job key (``runner.run.service.job_key``), its creation said on stderr."""
    from runner.run.service import job_key

    return job_key(option, os.environ, Lines())
