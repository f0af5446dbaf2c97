"""The harness's own git: how deltarun runs git on a workspace an agent controls. Pure.

Every git the harness runs (the baseline commit, taking the patch, applying it
in the verify sandbox) ignores what the workspace could say about how git
behaves: no hooks, no fsmonitor, no path protections (a name git would refuse
is the agent's business, never a harness failure), no CRLF conversion, and an
``info/attributes`` in the harness's own git directory that outranks every
``.gitattributes`` and switches off each attribute that filters, converts,
re-encodes or marks content binary.
"""

from __future__ import annotations

CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.protectNTFS=false",
    "core.protectHFS=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "safe.directory=*",
)
# $GIT_DIR/info/attributes has the highest precedence: "!attr" makes each unspecified.
NEUTRAL_ATTRIBUTES = (
    "* !text !eol !crlf !ident !filter !diff !merge !working-tree-encoding !encoding "
    "!whitespace !export-subst !delta\n"
)


def argv(*args: str) -> list[str]:
    """``git`` with the harness's settings, as an argument vector."""
    command = ["git"]
    for setting in CONFIG:
        command += ["-c", setting]
    return [*command, *args]


def shell() -> str:
    """``git`` with the harness's settings, for a ``sh -c`` script (no quoting needed)."""
    return " ".join(argv())
