"""``patch``: replays a recorded agent's outputs (or the gold solution) from a directory."""

from __future__ import annotations

from runner.agents.interface import AGENT_ENV, AgentContext, AgentResult, parse_answer
from runner.config.arms import Toggles
from runner.gitpatch import PatchError, touched_paths
from runner.paths import is_forbidden
from runner.sandbox.base import AGENT_UID, IO_DIR, ExecRequest
from runner.setup_signals import NO_OUTPUT_LOG
from runner.trees.archives import Member, single_file_tar


class Replay:
    """Replays recorded outputs: a diff applied with ``git apply`` as the agent user.

    ``files`` is the arm's directory as read (locally, or from the archive a
    remote worker fetched): ``<task_id>.abstain``, ``.answer.json`` or ``.diff``.
    """

    needs_agent_dir = False
    runs_programs = False  # git apply, run by the harness, leaves nothing behind
    toggles: Toggles | None = None

    def __init__(self, members: list[Member]) -> None:
        self.files = {m.path: m.data for m in members if not m.is_dir}

    def run(self, ctx: AgentContext) -> AgentResult:
        task_id = ctx.task.id
        abstain = self.files.get(f"{task_id}.abstain")
        answer = self.files.get(f"{task_id}.answer.json")
        diff = self.files.get(f"{task_id}.diff")
        if abstain is not None:
            reason = abstain.decode("utf-8", "replace").strip()
            return AgentResult(abstain_reason=reason or "abstained")
        if answer is not None:
            return parse_answer(answer, truncated=False)
        if diff is None:
            return AgentResult(log=NO_OUTPUT_LOG)
        if not diff.strip():
            return AgentResult(log="empty patch: nothing changed")  # a recorded "no fix"
        try:
            dropped = [p for p in touched_paths(diff) if is_forbidden(p, ctx.forbidden_paths)]
        except PatchError as exc:
            return AgentResult(exit_code=1, tool_calls=1, log=f"patch unreadable: {exc}")
        if dropped:
            # A recorded patch that writes a forbidden path is refused whole.
            return AgentResult(
                exit_code=1,
                tool_calls=1,
                tool_violation=True,
                log=f"patch refused: touches forbidden paths {dropped}",
            )
        ctx.sandbox.put_archive(
            IO_DIR,
            single_file_tar("agent.diff", diff, uid=AGENT_UID, gid=AGENT_UID),
        )
        result = ctx.sandbox.run(
            ExecRequest(
                argv=["git", "apply", "--whitespace=nowarn", f"{IO_DIR}/agent.diff"],
                env=AGENT_ENV,
                timeout_s=ctx.timeout_s,
                output_cap=ctx.output_cap,
            )
        )
        return AgentResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            tool_calls=1,
            log=result.output.decode("utf-8", "replace"),
        )
