"""What a run tells whoever shows it (the CLI's progress, a benchmark's silence): the
``Events`` a ``RunService`` calls, each returning at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runner.executors.contract import PreparedRun
from runner.records import Trial

if TYPE_CHECKING:
    pass
from runner.run.recording import Recording


class Notes(Protocol):
    """Where lines about a run go (a warning, the reaper, the registry)."""

    def note(self, line: str) -> None: ...


class Events(Notes, Protocol):
    """What a run tells whoever shows it; every method returns at once."""

    def started(self, prepared: PreparedRun, recording: Recording, total: int) -> None:
        """The executor is about to run the jobs still to do."""

    def recorded(self, trial: Trial, recording: Recording, total: int) -> None:
        """A record was written (the first of its job)."""

    def setup_warning(self, text: str) -> None:
        """The first record of a kind of setup warning (per arm)."""


class Quiet:
    """``Events`` that show nothing (benchmarks, tests)."""

    def note(self, line: str) -> None:
        pass

    def started(self, prepared: PreparedRun, recording: Recording, total: int) -> None:
        pass

    def recorded(self, trial: Trial, recording: Recording, total: int) -> None:
        pass

    def setup_warning(self, text: str) -> None:
        pass
