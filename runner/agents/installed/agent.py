"""``installed``: a catalogue CLI run headless in sandbox A, from the agent image.

Before it starts, its configuration is written into ``HOME`` as the agent's uid (the
catalogue's files, and on the ``-on`` leg of a ``baseline: both`` arm the toggle files);
the sandbox holds only a placeholder key (the gateway adds the real one). It runs under the
guard with the trial's limit, like a ``command`` agent. Afterwards: tokens and the route
lock from the gateway's log, the tool calls the model asked for checked against a
non-empty allowlist, a budget the gateway refused ending the trial as the agent's own miss,
and the CLI's session log read into steps (``transcript``) and kept whole with the
gateway's request log (``session``, ``runner.agents.installed.session``).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runner.agents.guarded import model_usage, run_guarded
from runner.agents.installed.kind import HOME, Kind, Launch, Step, violations
from runner.agents.installed.layer import agent_tag
from runner.agents.installed.session import session_archive
from runner.agents.interface import AGENT_ENV, AgentContext, AgentResult, collect_outputs
from runner.config.arms import InstalledAgent, Route, Toggles
from runner.config.controls import Price
from runner.paths import AGENT_UID
from runner.sandbox.base import ExecRequest, ModelCall, Sandbox
from runner.sandbox.copy_in import unpack_as_agent
from runner.trees.archives import Member, build_tar

ABSTAIN_HINT = (
    "\n\nIf the task cannot be done as asked, do not guess: write the reason to "
    "{path} and stop without changing files."
)
SESSION_CAP = 8 << 20
BUDGET_REASON = "budget exhausted"


class Installed:
    """One catalogue CLI as an arm's agent (one leg of it)."""

    needs_agent_dir = False
    runs_programs = True

    def __init__(
        self,
        kind: Kind,
        spec: InstalledAgent,
        route: Route,
        allowlist: tuple[str, ...],
        toggles: Toggles | None = None,
        on_files: list[Member] | None = None,
        on_env: Mapping[str, str] | None = None,
        transcript_cap: int = 256 << 10,
        price: Price | None = None,
    ) -> None:
        self.kind = kind
        self.spec = spec
        self.route = route
        self.allowlist = allowlist
        self.toggles = toggles  # the -off leg's
        self.on_files = list(on_files or [])
        self.env = {**AGENT_ENV, **(on_env or {}), **(toggles.env if toggles else {})}
        self.transcript_cap = transcript_cap
        self.price = price  # the route model's pinned price; None: not priced

    def image_on(self, base_id: str) -> str:
        """The tag of this CLI's layer on the base image ``base_id`` (built by ``deltarun
        build`` or before the run; pinned by ID in run.json)."""
        return agent_tag(self.kind, self.spec.version, base_id)

    def run(self, ctx: AgentContext) -> AgentResult:
        base_url = ctx.sandbox.model_base_url
        if base_url is None:
            return AgentResult(error="installed agents need runtime.network: model-only")
        prompt = ctx.prompt + ABSTAIN_HINT.format(path=AGENT_ENV["DELTARUN_ABSTAIN_FILE"])
        launch = Launch(
            prompt,
            self.route.model,
            base_url,
            self.spec.settings,
            self.allowlist,
            ctx.timeout_s,
            max_output_tokens=self.route.max_output_tokens,
        )
        invocation = self.kind.invocation(launch)
        unpack_as_agent(ctx.sandbox, HOME, self._home_tar(invocation.files))
        env = {**self.env, **invocation.env}
        result = run_guarded(ctx, invocation.argv, env)
        if result.error is not None:
            return result
        calls = ctx.sandbox.model_calls()
        result = self._judged(model_usage(result, calls, self.route), calls)
        session = read_session(ctx.sandbox, self.kind.session_logs)
        logs = {"stdout": result.log.encode("utf-8", "replace"), **session}
        steps, cut = transcript_of(self.kind.steps(logs), self.transcript_cap)
        result = replace(
            result,
            transcript=steps,
            transcript_truncated=cut,
            session=session_archive(session, result.log, calls),
        )
        if result.timed_out:
            return result
        return collect_outputs(ctx.sandbox, result, ctx.output_cap)

    def _home_tar(self, files: Mapping[str, bytes]) -> bytes:
        """The catalogue's files and the -on leg's toggle files, relative to HOME."""
        members = [
            Member(path.removeprefix(HOME + "/"), False, data, False)
            for path, data in sorted(files.items())
        ]
        prefix = self.kind.config_dir
        members += [
            Member(f"{prefix}/{m.path}", m.is_dir, m.data, m.executable) for m in self.on_files
        ]
        return build_tar(_with_parents(members), uid=AGENT_UID, gid=AGENT_UID)

    def _judged(self, result: AgentResult, calls: list[ModelCall]) -> AgentResult:
        """Tool calls against the allowlist, and the gateway's budget refusals."""
        names = [name for call in calls for name in call.tool_calls]
        outside = violations(self.kind, self.allowlist, names)
        result = replace(result, tool_calls=len(names))
        if outside:
            listed = ", ".join(sorted(set(outside))[:20])
            result = replace(
                result,
                tool_violation=True,
                log=result.log + f"\ndeltarun: tool calls outside tools.allowlist: {listed}\n",
            )
        if self.price is not None:
            dollars = self.price.usage_dollars(
                result.prompt_tokens,
                result.completion_tokens,
                result.cache_read_tokens,
                result.cache_write_tokens,
            )
            result = replace(result, cost_usd=round(dollars, 6))
        if any(call.budget_exhausted for call in calls) and result.error is None:
            result = replace(result, stop_reason="budget_exhausted", reason=BUDGET_REASON)
        return result


def _with_parents(members: list[Member]) -> list[Member]:
    """Every member's parent directories as members too (the tar is unpacked into HOME)."""
    dirs = {
        "/".join(m.path.split("/")[:i]) for m in members for i in range(1, m.path.count("/") + 1)
    }
    have = {m.path for m in members}
    return [Member(d, True, b"", False) for d in sorted(dirs - have)] + members


def read_session(
    sandbox: Sandbox, paths: tuple[str, ...], timeout_s: float = 60.0
) -> dict[str, bytes]:
    """The CLI's session files under HOME, read as the agent's uid (no more than the agent
    could read) within ``SESSION_CAP``: regular files only, by path relative to HOME.

    The read stops at the cap at once, in time proportional to the cap: a file larger
    than the cap (a sparse terabyte) is never opened, and the archive stream is cut by
    ``head`` (tar then dies of SIGPIPE) rather than drained to the command's timeout."""
    script = (
        'cd "$1" && shift && '
        f'find "$@" -type f -size -{SESSION_CAP + 1}c -print0 2>/dev/null'
        " | tar -c -f - --null -T - --no-recursion --ignore-failed-read 2>/dev/null"
        f" | head -c {SESSION_CAP}"
    )
    result = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", script, "sh", HOME, *paths],
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            timeout_s=timeout_s,
            output_cap=SESSION_CAP,
            separate_stderr=True,
        )
    )
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(result.output), mode="r:") as archive:
            for member in archive:
                if member.isreg() and member.size <= SESSION_CAP:
                    data = archive.extractfile(member)
                    if data is not None:
                        found[member.name] = data.read()
    except (tarfile.TarError, EOFError):
        pass  # a log cut at the cap: what was read is kept
    return found


def transcript_of(steps: list[Step], cap: int) -> tuple[list[dict[str, Any]] | None, bool]:
    """The steps as the record's ``transcript``, within ``cap`` bytes (cut at a step), and
    whether it was cut."""
    kept: list[dict[str, Any]] = []
    size = 0
    for step in steps:
        entry = {k: v for k, v in step.__dict__.items() if v not in (None, "", 0)}
        size += len(str(entry)) + 8
        if size > cap:
            return kept, True
        kept.append(entry)
    return kept or None, False
