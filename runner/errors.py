"""The exception tree of deltarun, and the exit code each one maps to.

    DeltarunError                 base; carries ``exit_code`` and a one-line message
    ├── UserError                 exit 1: bad input (file, field, fix), missing image, no Docker
    │   ├── ArchiveError          an archive member is unsafe or over a cap
    │   └── SuitePathError        exit 2: a path a suite names leads out of it (``..``, absolute,
    │                             a symbolic link), or deltarun would write through a link
    ├── UsageError                exit 2: a command line that makes no sense
    ├── DigestMismatch            exit 3: a sealed digest does not match the bytes on disk
    ├── ProtocolMismatch          exit 3: a run directory belongs to another protocol hash
    ├── RouteMismatch             exit 3: a scored run met a reply from another model than pinned
    ├── NoControlArm              exit 4: a report without a control arm
    ├── RunInterrupted            exit 130: Ctrl-C; every finished trial is recorded
    └── InfraError                an infrastructure failure inside a trial (Docker, I/O);
        ├── SandboxError          recorded as outcome ``error``, never as an agent failure
        └── EndpointError         the model endpoint: unreachable, key refused, retries spent

Exit code 5 is not an error: ``deltarun gate``'s "not decided" (``runner.report.gate_decision``
defines the gate's codes: 0 pass, 1 fail, 5 not decided).

Third-party exceptions (docker, yaml, pydantic) are translated into these at the
boundary with ``raise ... from exc``, so the CLI prints one line and exits with
the right code, never a traceback.
"""

from __future__ import annotations


class DeltarunError(Exception):
    """Base of every error deltarun raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UserError(DeltarunError):
    """Bad input: the message names the file, the field and the fix."""

    exit_code = 1


class ArchiveError(UserError):
    """An archive member is unsafe (link, device, absolute or ``..`` path) or over a cap."""


class SuitePathError(UserError):
    """A path named by suite input (a task line, controls, a kit, an instances file) that
    leaves the directory of the file naming it, or a link where deltarun would write: the
    message names the file, the field and the path. Exit 2, as for a command line that
    cannot be carried out: nothing was read from or written to where the path leads."""

    exit_code = 2


class UsageError(DeltarunError):
    """A command line that cannot be carried out as given."""

    exit_code = 2


class DigestMismatch(DeltarunError):
    """A pinned SHA-256 does not match the bytes: the run stops before any sandbox starts."""

    exit_code = 3


class ProtocolMismatch(DeltarunError):
    """A run directory, or a record, belongs to another protocol hash."""

    exit_code = 3


class RouteMismatch(DeltarunError):
    """In the scored channel, an endpoint answered as another model than the pinned one."""

    exit_code = 3


class NoControlArm(DeltarunError):
    """No control arm in the records: no number leaves deltarun."""

    exit_code = 4


class RunInterrupted(DeltarunError):
    """The run was interrupted (Ctrl-C); finished trials are kept, running ones discarded."""

    exit_code = 130


class InfraError(DeltarunError):
    """An infrastructure failure during a trial; the trial is recorded with outcome ``error``."""

    exit_code = 1


class SandboxError(InfraError):
    """The Docker engine failed, stalled or refused a request during a trial."""


class EndpointError(InfraError):
    """The model endpoint was unreachable, refused the key or kept failing after retries."""
