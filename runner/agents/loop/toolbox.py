"""Carrying out allowed tool calls inside the sandbox, as the agent user.

``runner.agents.loop.tool_policy`` decides; this module acts. Each call runs as uid 1000 in
``/workspace`` through ``Sandbox.run`` with its own timeout (never past the
trial's deadline) and output cap. Paths the policy allowed are resolved inside
the sandbox (``realpath``, symlinks followed) and checked again before use.
The hidden test never enters this sandbox: ``run_hidden_test`` asks the trial
to grade the current patch in a separate, fresh sandbox and returns only pass
or fail.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runner.agents.interface import BASE_ENV
from runner.agents.loop.tool_policy import Allowed, Refused, check, check_resolved
from runner.sandbox.base import WORKSPACE, ExecRequest, ExecResult, Sandbox

_READS = frozenset({"read_file", "list_dir", "search"})


@dataclass(frozen=True)
class ToolPolicy:
    """The controls' ``tools`` section, as the toolbox needs it."""

    allowlist: tuple[str, ...]
    forbidden: tuple[str, ...]
    call_timeout_s: float
    output_cap: int
    test_command: str


@dataclass(frozen=True)
class ToolResult:
    """What one call returns to the model, and what it means for the trial."""

    content: str
    refused: bool = False
    violation: bool = False
    rule: str | None = None
    deadline_hit: bool = False
    end: str | None = None  # "submit" or "abstain": the call ends the trial
    answer: Any = None
    answer_present: bool = False
    abstain_reason: str | None = None


class Toolbox:
    """Runs the calls of one trial in its sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        policy: ToolPolicy,
        hidden_test: Callable[[], bool] | None,
        deadline: float,
    ) -> None:
        self.sandbox = sandbox
        self.policy = policy
        self.hidden_test = hidden_test
        self.deadline = deadline

    def call(self, name: str, raw_arguments: str) -> ToolResult:
        decision = check(name, raw_arguments, self.policy.allowlist, self.policy.forbidden)
        if isinstance(decision, Refused):
            return _refused(decision)
        if decision.paths and name not in _READS:  # reads resolve in the same exec
            resolved = self._resolve(decision.paths)
            if isinstance(resolved, Refused):
                return _refused(resolved)
            decision = Allowed(decision.name, decision.args, resolved)
        handler = getattr(self, f"_{name}")
        result: ToolResult = handler(decision)
        return result

    # -- paths -------------------------------------------------------------------------

    def _resolve(self, paths: Sequence[str]) -> tuple[str, ...] | Refused:
        """Follow symlinks inside the sandbox; every resolved path must pass the policy."""
        if not paths:
            return ()
        targets = [posixpath.join(WORKSPACE, p) for p in paths]
        result = self._exec(["realpath", "-m", "--", *targets], 1 << 16)
        lines = result.output.decode("utf-8", "surrogateescape").splitlines()
        if result.exit_code != 0 or len(lines) != len(paths):
            return Refused(f"cannot resolve {list(paths)}", violation=False)
        resolved: list[str] = []
        for requested, line in zip(paths, lines, strict=True):
            checked = check_resolved(requested, line, self.policy.forbidden)
            if isinstance(checked, Refused):
                return checked
            resolved.append(checked)
        return tuple(resolved)

    def _resolved_read(self, rel: str, argv: list[str], cap: int) -> ExecResult | ToolResult:
        """One exec for a read: resolve ``rel`` inside the sandbox, then run ``argv``.

        The read runs as the agent user, so it sees nothing the agent could not read
        itself; its output is returned only when the resolved path passes the policy
        (else the call is refused as if resolved first). One exec instead of two:
        reads are most of a model's calls.
        """
        script = 'realpath -m -- "$1" || exit 120; printf "\\000"; shift; exec "$@"'
        result = self._exec(["sh", "-c", script, "sh", _abs(rel), *argv], cap + 4096)
        if result.timed_out:
            return self._finished(result, "")
        head, separator, rest = result.output.partition(b"\0")
        if not separator:
            return _refused(Refused(f"cannot resolve {rel!r}", violation=False))
        checked = check_resolved(
            rel, head.decode("utf-8", "surrogateescape").rstrip("\n"), (self.policy.forbidden)
        )
        if isinstance(checked, Refused):
            return _refused(checked)
        return replace(result, output=rest[:cap], output_truncated=len(rest) > cap)

    # -- tools -------------------------------------------------------------------------

    def _read_file(self, call: Allowed) -> ToolResult:
        cap = self.policy.output_cap
        rel = call.paths[0]
        result = self._resolved_read(rel, ["head", "-c", str(cap + 1), "--", _abs(rel)], cap + 1)
        if isinstance(result, ToolResult):
            return result
        if result.exit_code != 0:
            return self._finished(result, f"cannot read {rel}")
        data = result.output
        text = data[:cap].decode("utf-8", "replace")
        if len(data) > cap:
            text += f"\n[truncated at {cap} bytes]"
        return self._finished(result, text)

    def _list_dir(self, call: Allowed) -> ToolResult:
        rel = call.paths[0]
        argv = [
            "find",
            "-H",
            _abs(rel),
            "-mindepth",
            "1",
            "-maxdepth",
            "1",
            "-printf",
            r"%y %s %P\n",
        ]
        result = self._resolved_read(rel, argv, 1 << 20)
        if isinstance(result, ToolResult):
            return result
        if result.exit_code != 0:
            return self._finished(result, f"cannot list {rel}")
        entries = []
        for line in sorted(result.output.decode("utf-8", "replace").splitlines()):
            kind, _, rest = line.partition(" ")
            size, _, name = rest.partition(" ")
            path = posixpath.normpath(posixpath.join(rel, name))
            if isinstance(check_resolved(path, _abs(path), self.policy.forbidden), Refused):
                continue  # forbidden entries are not shown
            entries.append(f"{'dir ' if kind == 'd' else 'file'} {size:>9} {name}")
        return self._finished(result, "\n".join(entries) or "(empty)")

    def _search(self, call: Allowed) -> ToolResult:
        rel = call.paths[0]
        argv = ["grep", "-rnIE", "--color=never", "-e", call.args["pattern"], "--", rel]
        result = self._resolved_read(rel, argv, 1 << 20)
        if isinstance(result, ToolResult):
            return result
        if result.exit_code not in (0, 1):
            return self._finished(result, f"search failed: {_text(result.output, 500)}")
        kept = []
        for line in result.output.decode("utf-8", "replace").splitlines():
            path = posixpath.normpath(line.split(":", 1)[0])
            if isinstance(check_resolved(path, _abs(path), self.policy.forbidden), Refused):
                continue
            kept.append(line)
        text = "\n".join(kept) or "(no matches)"
        return self._finished(result, text)

    def _write_file(self, call: Allowed) -> ToolResult:
        target = _abs(call.paths[0])
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        data = call.args["content"].encode("utf-8", "surrogatepass")
        result = self._exec(["sh", "-c", script, "sh", target], 1 << 14, stdin=data)
        if result.exit_code != 0:
            return self._finished(result, f"write failed: {_text(result.output, 2000)}")
        return self._finished(result, f"wrote {len(data)} bytes to {call.paths[0]}")

    def _apply_patch(self, call: Allowed) -> ToolResult:
        data = call.args["patch"].encode("utf-8", "surrogatepass")
        if not data.endswith(b"\n"):
            data += b"\n"
        argv = ["git", "apply", "--verbose", "--recount", "--whitespace=nowarn", "-"]
        result = self._exec(argv, 1 << 16, stdin=data)
        if result.exit_code != 0:
            return self._finished(result, f"patch did not apply: {_text(result.output, 4000)}")
        return self._finished(result, f"patch applied: {_text(result.output, 4000)}")

    def _run_command(self, call: Allowed) -> ToolResult:
        return self._shell(call.args["command"])

    def _run_tests(self, call: Allowed) -> ToolResult:
        return self._shell(self.policy.test_command)

    def _run_hidden_test(self, call: Allowed) -> ToolResult:
        if self.hidden_test is None:
            return ToolResult("this task is graded on its answer, not by a test")
        return ToolResult("pass" if self.hidden_test() else "fail")

    def _submit(self, call: Allowed) -> ToolResult:
        present = "answer" in call.args
        return ToolResult(
            "submitted", end="submit", answer=call.args.get("answer"), answer_present=present
        )

    def _abstain(self, call: Allowed) -> ToolResult:
        reason = call.args["reason"].strip() or "abstained"
        return ToolResult("abstained", end="abstain", abstain_reason=reason[:4096])

    # -- execution ---------------------------------------------------------------------

    def _shell(self, command: str) -> ToolResult:
        result = self._exec(["sh", "-c", command], self.policy.output_cap, untrusted=True)
        if result.timed_out:
            return self._finished(result, "")
        body = result.output.decode("utf-8", "replace")
        if result.output_truncated:
            body += f"\n[output truncated at {self.policy.output_cap} bytes]"
        return self._finished(result, f"exit code {result.exit_code}\n{body}")

    def _exec(
        self, argv: list[str], cap: int, stdin: bytes | None = None, *, untrusted: bool = False
    ) -> ExecResult:
        """A tool's command; ``untrusted`` when the model wrote it (``ExecRequest``)."""
        remaining = self.deadline - time.monotonic()
        timeout = max(0.5, min(self.policy.call_timeout_s, remaining))
        return self.sandbox.run(
            ExecRequest(
                argv=argv,
                env=BASE_ENV,
                timeout_s=timeout,
                output_cap=cap,
                stdin=stdin,
                untrusted=untrusted,
            )
        )

    def _finished(self, result: ExecResult, text: str) -> ToolResult:
        if result.timed_out:
            deadline_hit = time.monotonic() >= self.deadline - 0.05
            limit = "the trial's time limit" if deadline_hit else "the call's time limit"
            return ToolResult(f"timed out ({limit})", deadline_hit=deadline_hit)
        return ToolResult(self._cap(text))

    def _cap(self, text: str) -> str:
        cap = self.policy.output_cap
        if len(text) <= cap:
            return text
        return text[:cap] + f"\n[truncated at {cap} characters]"


def _refused(refusal: Refused) -> ToolResult:
    rule = refusal.detail.get("rule") if refusal.violation else None
    prefix = "refused" if refusal.violation else "error"
    return ToolResult(
        f"{prefix}: {refusal.message}", refused=True, violation=refusal.violation, rule=rule
    )


def _abs(rel: str) -> str:
    return WORKSPACE if rel == "." else posixpath.join(WORKSPACE, rel)


def _text(data: bytes, limit: int) -> str:
    return data[-limit:].decode("utf-8", "replace").strip()
