"""deltarun-guard: nothing of the agent's uid outlives the agent's program.

Copied into a sandbox and run as the agent's uid with the image's own python3
(standard library only, any python3 >= 3.6), inside coreutils ``timeout``:

``python3 -I -S guard.py run [--no-ptrace] -- ARGV...``
    Runs ARGV (its stderr joined to its stdout). When the program's main process
    exits, every other process of this uid is killed before that exit can be
    observed: the guard traces the program (``PTRACE_O_TRACEEXIT``), which holds
    it at ``PTRACE_EVENT_EXIT`` -- pid alive, not a zombie, fds still open --
    while the rest is frozen and killed. Without ptrace (refused by seccomp or
    gVisor, or ``--no-ptrace``) the exit is observed with ``waitid(WNOWAIT)``:
    the pid stays a zombie, but the program's fds are already closed. Then one
    line on the guard's own fd 2, after everything else is dead::

        deltarun-guard: mode=<ptrace|wait> exit=<N>|signal=<S>|terminated=<S> [stragglers=<k>]

    Exit status: the program's exit code, 128+S when a signal killed it, and
    128+S when the guard itself got SIGTERM, SIGINT or SIGHUP (then it kills
    everything first). ``error=<exception>`` (status 125) replaces the outcome
    if the guard itself failed (fork refused by the pids limit, a bug), after
    the same killing; ``stragglers`` counts processes still alive after 10 s.
    When the main thread exits alone (pthread_exit) or another thread execs,
    the program is killed as it would be by its exit: the guard traces the
    main thread only. A path on the first line of standard input (the harness's
    secret name, read before the program exists) gets a copy of the report line
    (``runner.sandbox.guard_run``); the program's standard input is ``/dev/null``.
``python3 -I -S guard.py sweep``
    Kills every other process of this uid; prints ``deltarun-guard: swept=<k>``.
``python3 -I -S guard.py census UID``
    Counts the live (not zombie) processes of UID; prints ``deltarun-guard: live=<k>``.
    Reads ``/proc`` only, so the harness runs it as root, where no process of UID can
    touch it, to check that a sweep left nothing.

"Every other process" spares the guard's ancestors (the ``timeout`` that runs
it): they are frozen with the rest and resumed, never killed, so the exec still
ends with the guard's exit status.

One file on purpose: it is copied in and executed standalone. The agent phase ships
it as ``/io/.deltarun-guard.py``, in the ``/io`` the agent can write to, and
``python3 -I`` keeps a script's own directory off ``sys.path``. Modules beside it
would be imported from that writable directory (a ``__pycache__`` the agent planted
there would run in the next ``sweep``); a root-owned directory of their own would be
a new way of shipping, in every place that copies the guard in.
"""

import errno
import os
import sys
import time

MYPY = False  # mypy takes this as True
if MYPY:
    import signal
else:
    try:
        import _signal as signal  # the C module: `signal` imports enum, 8 ms more per start
    except ImportError:
        import signal

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PTRACE_CONT = 7
PTRACE_GETEVENTMSG = 0x4201
PTRACE_SEIZE = 0x4206
PTRACE_O_TRACEEXIT = 0x40
PTRACE_O_EXITKILL = 0x100000
PTRACE_EVENT_EXIT = 6
PTRACE_EVENT_STOP = 128

STOP_GIVE_UP_S = 10.0
PREFIX = "deltarun-guard: "
TERMINATING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Terminated(Exception):
    """The guard got SIGTERM, SIGINT or SIGHUP."""


class _State:
    signum = 0  # the terminating signal the guard got, 0 if none
    critical = False  # the handler records the signal but does not interrupt
    copy = ""  # where the report line goes a second time ("": nowhere)


def _on_signal(signum: int, frame: object) -> None:
    if not _State.signum:
        _State.signum = signum
    if not _State.critical:
        _State.critical = True  # one interruption only; the cleanup runs to its end
        raise Terminated()


# --- libc --------------------------------------------------------------------------


class _Libc:
    """ptrace and prctl through ctypes; without ctypes (``ok`` false) they fail with ENOSYS."""

    def __init__(self) -> None:
        self.ok = False
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            ptrace = libc.ptrace
            # long ptrace(enum __ptrace_request, pid_t, void *addr, void *data)
            ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            ptrace.restype = ctypes.c_long
            prctl = libc.prctl
            # int prctl(int option, unsigned long arg2, arg3, arg4, arg5)
            prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
            prctl.restype = ctypes.c_int
        except Exception:
            return
        self._ctypes = ctypes
        self._ptrace = ptrace
        self._prctl = prctl
        self.ok = True

    def prctl(self, option: int, arg: int) -> int:
        """0, or the errno."""
        if not self.ok:
            return errno.ENOSYS
        if self._prctl(option, arg, 0, 0, 0) == 0:
            return 0
        return self._ctypes.get_errno() or errno.EINVAL

    def ptrace(self, request: int, pid: int, addr: int, data: int) -> int:
        """0, or the errno."""
        if not self.ok:
            return errno.ENOSYS
        self._ctypes.set_errno(0)
        if self._ptrace(request, pid, addr or None, data or None) != -1:
            return 0
        return self._ctypes.get_errno()

    def event_message(self, pid: int) -> "int | None":
        if not self.ok:
            return None
        value = self._ctypes.c_ulong(0)
        if self.ptrace(PTRACE_GETEVENTMSG, pid, 0, self._ctypes.addressof(value)) != 0:
            return None
        return int(value.value)


# --- stopping everyone -------------------------------------------------------------


def _status_fields(pid: int) -> "tuple[bytes, int, int] | None":
    """(state letter, real uid, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            data = handle.read()
    except OSError:  # vanished (FileNotFoundError, ProcessLookupError) or hidden
        return None
    state, uid, ppid = b"?", -1, -1
    for line in data.split(b"\n"):
        if line.startswith(b"State:"):
            parts = line.split()
            state = parts[1] if len(parts) > 1 else b"?"
        elif line.startswith(b"PPid:"):
            parts = line.split()
            ppid = int(parts[1]) if len(parts) > 1 else -1
        elif line.startswith(b"Uid:"):
            parts = line.split()
            uid = int(parts[1]) if len(parts) > 1 else -1
            break  # Uid comes after State and PPid
    return state, uid, ppid


def _ancestors() -> "set[int]":
    """The guard's ancestors (``timeout``), read afresh: an agent cannot become one."""
    found = set()
    pid = os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        fields = _status_fields(pid)
        if fields is None:
            break
        pid = fields[2]
    return found


def _others(uid: int, spare: "set[int]") -> "list[int]":
    """Live (not zombie) processes of ``uid`` in this pid namespace, minus ``spare``."""
    found = []  # type: list[int]
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in spare:
            continue
        fields = _status_fields(pid)
        if fields is None:
            continue
        state, owner, _ppid = fields
        if owner == uid and state not in (b"Z", b"X"):
            found.append(pid)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:  # ProcessLookupError, PermissionError
        pass


def stop_everyone(spare: "tuple[int, ...]" = ()) -> "tuple[int, int]":
    """Kill every other process of this uid; (found on the first scan, stragglers).

    Each round freezes them all at once with ``kill(-1, SIGSTOP)`` (atomic against
    fork: the kernel holds the task list while it signals), then kills what a
    /proc scan finds with SIGKILL. The guard's ancestors and ``spare`` (the
    traced program, held at its exit) are frozen too but never killed; the
    ancestors are resumed with SIGCONT after each round. Gives up after 10 s.
    """
    me, uid = os.getpid(), os.getuid()
    deadline = time.monotonic() + STOP_GIVE_UP_S
    first = -1
    ancestors = set()  # type: set[int]
    try:
        while True:
            ancestors = _ancestors()
            keep = ancestors | set(spare) | {me, 1}  # kill(-1) spares init (pid 1) too
            try:
                os.kill(-1, signal.SIGSTOP)
            except OSError:  # ESRCH: nothing else of this uid
                pass
            live = _others(uid, keep)
            if first < 0:
                first = len(live)
            for pid in live:
                _signal(pid, signal.SIGKILL)
            for pid in ancestors:  # between rounds too: `timeout -k` may end a stuck guard
                _signal(pid, signal.SIGCONT)
            if not live:
                return first, 0
            if time.monotonic() > deadline:
                return first, len(live)
            time.sleep(0.001)
    finally:
        for pid in ancestors:
            _signal(pid, signal.SIGCONT)


# --- run ---------------------------------------------------------------------------


def _read_byte(fd: int) -> None:
    """Wait for one byte (or end of file) on a pipe."""
    while True:
        try:
            os.read(fd, 1)
            return
        except InterruptedError:
            continue


def _child(argv: "list[str]", pipes: "tuple[int, int, int, int]", libc: _Libc) -> None:
    """In the forked child: never returns. ``pipes``: (go_r, go_w, ready_r, ready_w)."""
    go_r, go_w, ready_r, ready_w = pipes
    try:
        for signum in range(1, signal.NSIG):
            if signum in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass
        os.close(go_w)
        os.close(ready_r)
        # Inherited from the guard: a non-dumpable process cannot be traced without
        # CAP_SYS_PTRACE, not even by its parent. execve makes the program dumpable anyway.
        libc.prctl(PR_SET_DUMPABLE, 1)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the guard dies: so do we
        os.dup2(1, 2)
        os.write(ready_w, b"r")
        os.close(ready_w)
        _read_byte(go_r)  # the guard attached (or gave up)
        os.close(go_r)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            reason = os.strerror(exc.errno or errno.ENOENT)
            message = f"deltarun-guard: cannot run {argv[0]}: {reason}\n"
            os.write(1, message.encode("utf-8", "replace"))
    except BaseException:
        pass
    os._exit(127)


def _report(mode: str, status: "int | None", stragglers: int, error: str = "") -> int:
    """Write the report line; the guard's exit status."""
    if _State.signum:
        outcome, code = f"terminated={_State.signum}", 128 + _State.signum
    elif error:
        outcome, code = f"error={error}", 125
    elif status is None:
        outcome, code = "exit=125", 125
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        outcome, code = f"signal={sig}", 128 + sig
    else:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125
        outcome = f"exit={code}"
    line = f"{PREFIX}mode={mode} {outcome}"
    if stragglers:
        line += f" stragglers={stragglers}"
    for path in (_State.copy, "") if _State.copy else ("",):  # "": the guard's fd 2
        try:  # the copy never through a link, never over a file already there
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(path, flags, 0o644) if path else 2
            os.write(fd, (line + "\n").encode("ascii"))
        except OSError:
            pass
    return code


def _copy_path() -> str:  # the first line of standard input, then /dev/null in its place
    try:
        path = os.read(0, 4096).decode("ascii").strip()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    except (OSError, UnicodeDecodeError):
        return ""
    return path if path.startswith("/") else ""


def _waitpid(pid: int, options: int) -> "int | None":
    """The wait status, None when there is no such child any more."""
    while True:
        try:
            return os.waitpid(pid, options)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return None


def _traced(child: int, libc: _Libc) -> "tuple[int | None, int]":
    """Wait for the traced program; everything else is dead before its exit completes."""
    stragglers, stopped, event_status = 0, False, None
    while True:
        status = _waitpid(child, 0)
        if status is None:
            break
        if not os.WIFSTOPPED(status):
            break
        event = status >> 16
        if event == PTRACE_EVENT_EXIT:
            event_status = libc.event_message(child)
            _State.critical = True
            _, stragglers = stop_everyone(spare=(child,))
            stopped = True
            # Its other threads, if the main thread left alone (pthread_exit): the
            # process has begun to exit and nothing of this uid may outlive that.
            _signal(child, signal.SIGKILL)
            libc.ptrace(PTRACE_CONT, child, 0, 0)
        elif event == PTRACE_EVENT_STOP:
            libc.ptrace(PTRACE_CONT, child, 0, 0)
        else:
            libc.ptrace(PTRACE_CONT, child, 0, os.WSTOPSIG(status))
    _State.critical = True
    if not stopped:
        _, stragglers = stop_everyone()
    if event_status is not None and (status is None or _killed_by_us(status, event_status)):
        status = event_status
    return status, stragglers


def _killed_by_us(status: int, event_status: int) -> bool:
    """The reaped status is our SIGKILL of a program that had already begun to exit."""
    return (
        os.WIFSIGNALED(status)
        and os.WTERMSIG(status) == signal.SIGKILL
        and not (os.WIFSIGNALED(event_status) and os.WTERMSIG(event_status) == signal.SIGKILL)
    )


def _waited(child: int) -> "tuple[int | None, int]":
    """Without ptrace: see the exit without reaping (the pid stays a zombie), stop, reap."""
    while True:
        try:
            os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    _State.critical = True
    _, stragglers = stop_everyone()
    return _waitpid(child, 0), stragglers


def _terminate(child: int, libc: _Libc) -> "tuple[int | None, int]":
    """Kill everything, the program last (traced or not), reap it."""
    # Spared because a traced program may sit in a ptrace stop, its exit stop included,
    # that SIGKILL does not end: a scan would wait for it in vain.
    _, stragglers = stop_everyone(spare=(child,) if child > 0 else ())
    status = None
    if child > 0:
        _signal(child, signal.SIGKILL)
        libc.ptrace(PTRACE_CONT, child, 0, 0)  # ESRCH when it is not in a ptrace stop
        while True:
            status = _waitpid(child, 0)
            if status is None or not os.WIFSTOPPED(status):
                break
            libc.ptrace(PTRACE_CONT, child, 0, 0)
        _, stragglers = stop_everyone()
    return status, stragglers


def run(argv: "list[str]", use_ptrace: bool) -> int:
    libc = _Libc()
    libc.prctl(PR_SET_DUMPABLE, 0)  # the agent's processes (same uid) cannot ptrace us
    _State.copy = _copy_path()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    blocked = set(TERMINATING)
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    for signum in TERMINATING:
        signal.signal(signum, _on_signal)
    child, error = -1, ""
    mode = "ptrace" if use_ptrace and libc.ok else "wait"
    try:
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        child = os.fork()
        if child == 0:
            _child(argv, (go_r, go_w, ready_r, ready_w), libc)
        os.close(go_r)
        os.close(ready_w)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        _read_byte(ready_r)  # it is dumpable now
        os.close(ready_r)
        if mode == "ptrace":
            options = PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL
            if libc.ptrace(PTRACE_SEIZE, child, 0, options) != 0:
                mode = "wait"  # EPERM, ENOSYS: seccomp, gVisor
        os.write(go_w, b"g")
        os.close(go_w)
        status, stragglers = _traced(child, libc) if mode == "ptrace" else _waited(child)
    except Terminated:
        status, stragglers = _terminate(child, libc)
    except Exception as exc:  # a bug, or fork failed (EAGAIN): still leave nothing behind
        _State.critical = True
        error = type(exc).__name__
        status, stragglers = _terminate(child, libc)
    return _report(mode, status, stragglers, error)


# --- sweep -------------------------------------------------------------------------


def sweep() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    found, stragglers = stop_everyone()
    line = f"{PREFIX}swept={found}"
    if stragglers:
        line += f" stragglers={stragglers}"
    os.write(1, (line + "\n").encode("ascii"))
    return 0


def census(uid: int) -> int:
    live = _others(uid, {os.getpid()})
    os.write(1, f"{PREFIX}live={len(live)}\n".encode("ascii"))
    return 0


# --- main --------------------------------------------------------------------------

USAGE = "usage: guard.py run [--no-ptrace] -- ARGV... | guard.py sweep | guard.py census UID\n"


def main(args: "list[str]") -> int:
    if args[:1] in (["run"], ["sweep"]) and os.getuid() == 0:
        # kill(-1) as root would reach every root process (on a host: the machine).
        os.write(2, (PREFIX + "refusing to run as root\n").encode("ascii"))
        return 2
    if args[:1] == ["run"] and "--" in args:
        split = args.index("--")
        options, rest = args[1:split], args[split + 1 :]
        if rest and set(options) <= {"--no-ptrace"}:
            return run(rest, use_ptrace="--no-ptrace" not in options)
    elif args == ["sweep"]:
        return sweep()
    elif len(args) == 2 and args[0] == "census" and args[1].isdigit():
        return census(int(args[1]))
    os.write(2, USAGE.encode("ascii"))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
