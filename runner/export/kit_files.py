"""The replay kit's own files as text: ``replay.sh`` (digests, then rerun or re-verify) and
``README.md`` (what each file is). Pure; ``runner.export.kit`` writes them."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from runner.errors import UserError
from runner.store.rundir import RunMeta


@dataclass(frozen=True)
class KitInput:
    """One input the controls lead to: its path from the controls' folder, the original."""

    what: str  # for messages: "suite.file", "task 't1' repo", "arms[1].agent.dir", ...
    rel: str  # lexically normalised, relative to the controls' folder
    original: Path
    pin: str
    is_dir: bool = False


def _sums_line(rel: str, digest: str) -> str:
    """One line of ``sha256sum -c`` input (GNU escaping of backslash and newline)."""
    if any(ord(ch) < 32 and ch != "\n" for ch in rel):
        raise UserError(f"{rel!r}: a control character in a file name; rename the file")
    if "\\" in rel or "\n" in rel:
        return "\\" + digest + "  " + rel.replace("\\", "\\\\").replace("\n", "\\n")
    return f"{digest}  {rel}"


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def replay_script(meta: RunMeta, controls_rel: str, sums: list[tuple[str, str]]) -> str:
    """replay.sh: POSIX sh; check every digest, then rerun and compare, or re-verify.

    Longer than 60 lines: one shell-script template, read top to bottom as it runs."""
    listing = "\n".join(_sums_line(rel, digest) for rel, digest in sums)
    version = meta.deltarun_version
    metrics_sha = meta.builtin_metrics_sha256 or "not recorded"
    scoring_sha = meta.scoring_sha256 or "not recorded"
    scoring_check = (
        f"""scoring=$("$DELTARUN" --version 2>/dev/null | sed -n 's/^scoring sha256 //p')
if [ "$scoring" != {meta.scoring_sha256} ]; then
    echo "replay.sh: $DELTARUN is deltarun {version} with other scoring code (sha256" \\
        "${{scoring:-unknown}}, the run's {scoring_sha}): install the release itself" >&2
    exit 1
fi
"""
        if meta.scoring_sha256
        else ""
    )
    return f"""#!/bin/sh
# Replay kit of run {meta.run_id}
# protocol {meta.protocol_sha256}
# suite {meta.suite_sha256}
# deltarun {meta.deltarun_version} (scoring code sha256 {scoring_sha}, built-in metrics sha256
# {metrics_sha})
# Written by `deltarun export`. Usage:
#   sh replay.sh                check every digest, rerun the whole run into rerun-<timestamp>/
#                               (Docker and the sandbox images needed), then compare it with run/
#   sh replay.sh --verify-only  check every digest, then re-run the hidden tests on the patches
#                               recorded in run/ and list every verdict that changed (exit 1 if any)
# Environment: DELTARUN (the deltarun executable; default: deltarun on PATH), J (trials at once, 2).
# Exit: 0 ok; 1 deltarun missing or a verdict changed; 2 usage; 3 a digest or protocol mismatch;
# otherwise deltarun's own exit code.
set -eu

PROTOCOL={meta.protocol_sha256}
CONTROLS={_sh_quote(controls_rel)}

mode=rerun
if [ $# -gt 1 ]; then
    echo "replay.sh: too many arguments; use: sh replay.sh [--verify-only]" >&2
    exit 2
fi
case "${{1:-}}" in
    "") ;;
    --verify-only) mode=verify ;;
    -h|--help) sed -n '2,/^set -eu$/p' "$0" | grep '^#'; exit 0 ;;
    *) echo "replay.sh: unknown argument $1; use: sh replay.sh [--verify-only]" >&2; exit 2 ;;
esac

DELTARUN=${{DELTARUN:-deltarun}}
case $DELTARUN in
    /*) ;;
    */*) DELTARUN=$(pwd)/$DELTARUN ;;
esac
cd -- "$(dirname -- "$0")"

# (a) every file of the kit against the digest it had when exported (the inputs were checked
# against the run's pins then); executable bits and empty folders of the agent directories
# are covered by the protocol hash, which both modes below check again.
if command -v sha256sum >/dev/null 2>&1; then
    check() {{ sha256sum -c --quiet; }}
elif command -v shasum >/dev/null 2>&1; then
    check() {{ shasum -a 256 -c --quiet; }}
else
    echo "replay.sh: needs sha256sum (GNU coreutils) or shasum to check the digests" >&2
    exit 1
fi
if ! check <<'DELTARUN_SUMS'
{listing}
DELTARUN_SUMS
then
    echo "replay.sh: digest mismatch: the files marked FAILED above differ from" \\
        "the run's pins; restore the kit" >&2
    exit 3
fi
echo "replay.sh: all digests match (protocol $PROTOCOL)"

if ! command -v "$DELTARUN" >/dev/null 2>&1; then
    echo "replay.sh: $DELTARUN not found; install deltarun {version}" \
        "or set DELTARUN=/path/to/deltarun" >&2
    exit 1
fi
# The scoring, metric and report code is deltarun's own: the version that made the run.
have=$("$DELTARUN" --version 2>/dev/null | sed -n 's/^deltarun //p')
if [ "$have" != {_sh_quote(version)} ]; then
    echo "replay.sh: this run was made with deltarun {version}; $DELTARUN is" \
        "${{have:-of unknown version}}: install deltarun {version} (or set DELTARUN)" >&2
    exit 1
fi
{scoring_check}
if [ "$mode" = verify ]; then
    # (c) the hidden tests again on every recorded patch; the controls must hash to the protocol.
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    status=0
    "$DELTARUN" replay run --reverify --controls "$CONTROLS" -j "${{J:-2}}" >"$log" || status=$?
    cat "$log"
    if [ "$status" -ne 0 ]; then
        exit "$status"
    fi
    if ! grep -q '^reverify: [0-9]* verdicts re-run, 0 changed$' "$log"; then
        echo "replay.sh: verdicts changed on re-verification (listed above)" >&2
        exit 1
    fi
    exit 0
fi

# (b) the whole run again, under the same protocol, then paired with the recorded run.
out=rerun-$(date -u +%Y%m%dT%H%M%SZ)
"$DELTARUN" run "$CONTROLS" --out "$out" --expect-protocol "$PROTOCOL" -j "${{J:-2}}"
"$DELTARUN" compare run "$out"
echo "replay.sh: rerun in $out (recorded run in run/)"
"""


def kit_readme(
    meta: RunMeta, controls_rel: str, layout: list[tuple[KitInput, str]], evidence: list[str]
) -> str:
    """The kit's README.md: what each file is and the two ways to run replay.sh.

    Longer than 60 lines: one Markdown template, read top to bottom as it is shown."""
    suite, rest = layout[0], layout[1:]
    archives = [rel for ref, rel in rest if not ref.is_dir and ref.what.startswith("task ")]
    rows = [f"| `{suite[1]}` | {suite[0].what} |"]
    if archives:
        folders = ", ".join(f"`{f}/`" for f in sorted({posixpath.dirname(a) for a in archives}))
        rows.append(f"| {folders} | the {len(archives)} fixture and hidden archives it names |")
    rows += [
        f"| `{rel}{'/' if ref.is_dir else ''}` | {ref.what} |"
        for ref, rel in rest
        if rel not in archives
    ]
    inputs = "\n".join(rows)
    shown = ", ".join(f"`{name}`" for name in evidence)
    return f"""# Replay kit of run `{meta.run_id}`

Written by `deltarun export`.

- protocol: `{meta.protocol_sha256}`
- suite: `{meta.suite_sha256}`
- arms: {", ".join(f"`{arm}`" for arm in meta.arms)} (control: `{meta.control_arm}`)
- run with deltarun {meta.deltarun_version} on Python {meta.python_version}; `replay.sh`
  needs that version with the same scoring code (sha256
  `{meta.scoring_sha256 or "not recorded"}` over runner/evidence, grading and report; the
  built-in metrics `{meta.builtin_metrics_sha256 or "not recorded"}`)

| path | what it is |
|---|---|
| `{controls_rel}` | the controls exactly as run (byte for byte the run's stored copy) |
{inputs}
| `run/` | the evidence to compare against: {shown} |
| `replay.sh` | checks every digest, then reruns or re-verifies (below) |
| `README.md` | this file |

Every input sits at the path the controls (or tasks.jsonl) name relative to
`{controls_rel}`; those strings are part of the protocol hash and the suite
digest, so they were not rewritten. Each was checked against its pin when the
kit was written, and `{controls_rel}` hashes to the run's protocol.

## Running it

Needs deltarun (on PATH, or `DELTARUN=/path/to/deltarun`), Docker and the
sandbox images the tasks name (run.json `image_digests` lists the ones used;
pinned images must have the same IDs). `J` sets the trials at once (default 2).
Both ways first check every file against the digest list inside replay.sh
(exit 3 naming the file on a difference) and work from any directory.

```sh
sh replay.sh                 # rerun everything into rerun-<timestamp>/ under
                             # --expect-protocol, then `deltarun compare run rerun-<timestamp>`
sh replay.sh --verify-only   # re-run the hidden tests on the patches recorded in run/
                             # (`deltarun replay run --reverify --controls {controls_rel}`);
                             # exit 1 when any verdict changed
```
"""
