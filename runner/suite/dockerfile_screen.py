"""What a suite's environment Dockerfile may reach: the suite's own build context and the
sandbox base, nothing else on this host. Pure: text in, the first problem out.

``deltarun build`` runs a suite's Dockerfile on this machine's engine, and the suite is
hostile until proven otherwise. A Dockerfile can name things outside its context that the
engine then reads on the suite's behalf:

- ``ADD <url>``: the engine fetches a URL itself, from the host's own network namespace,
  whatever the build's ``--network`` (a loopback service, a metadata address). So an
  ``ADD`` source is a path in the context: no ``://``, no ``user@host:`` remote, and no
  ``$`` (the engine expands variables, to a URL as readily as to a path).
- ``FROM <image>`` and ``COPY --from=<image>``: any image on this engine (another suite's
  environment, an agent's layer). So ``FROM`` names the base (``${BASE}``, the image
  ``deltarun build`` passes, or the base's own name), ``scratch`` or an earlier stage of
  the same Dockerfile, and ``--from`` an earlier stage.
- ``ONBUILD``: instructions that would run in deltarun's own builds over the environment
  (an installed agent's layer). Refused, as is ``VOLUME`` (a writable place on the engine's
  disk in every sandbox of the image, ``runner.sandbox.image_config``).
- ``RUN --mount``, ``--network``, ``--security``: BuildKit's ways for a step to reach the
  host's files, network or privileges; the classic builder deltarun uses has none of them,
  refused so that no engine's default builder can give them.

The text is read as Docker's parser reads it: comments and empty lines dropped, a line
ending in the escape character joined to the next. It is read twice, with ``\\`` and with
the backtick as the escape character (the ``# escape=`` directive), and a problem under
either reading is a problem: no directive trick reads one way here and another there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

ESCAPES = ("\\", "`")
BASE_ARG = ("${BASE}", "$BASE")  # the build argument deltarun passes: the base's image ID
RUN_FLAGS_REFUSED = ("mount", "network", "security")
# What the engine reads as a remote source: a URL, or git's scp-like user@host:path.
_REMOTE = re.compile(r"://|(?:^|\s)[\w.+-]+@[\w.-]+:")
_QUOTING = re.compile(r"[\"'`\\]")
_SHOWN = 60


@dataclass(frozen=True)
class Instruction:
    """One instruction: its first physical line, its keyword (upper case) and arguments."""

    line: int
    keyword: str
    args: str


@dataclass(frozen=True)
class Problem:
    """Why one instruction is refused, and what to write instead."""

    line: int
    why: str
    fix: str


def instructions(text: str, escape: str) -> list[Instruction]:
    """The instructions of ``text`` with ``escape`` as the escape character."""
    found: list[Instruction] = []
    pending: str | None = None
    start = 0
    # Docker's parser drops a leading byte order mark and splits at "\n" only.
    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # an empty line or a comment, also inside a continuation
        if pending is None:
            pending, start = "", number
        body = raw.rstrip(" \t\r")
        if body.endswith(escape):
            pending += body[: -len(escape)]
            continue
        found.append(_instruction(pending + raw, start))
        pending = None
    if pending:
        found.append(_instruction(pending, start))
    return found


def _instruction(text: str, line: int) -> Instruction:
    keyword, args = _word(text)
    return Instruction(line, keyword.upper(), args)


def _word(text: str) -> tuple[str, str]:
    """The first whitespace-delimited word of ``text`` and the rest, stripped."""
    head = re.match(r"\s*(\S*)\s*(.*)", text, re.DOTALL)
    assert head is not None  # the pattern matches every text
    return head[1], head[2].strip()


def first_problem(text: str, bases: Collection[str]) -> Problem | None:
    """The first instruction (by line) of ``text`` that reaches outside the context and the
    base under either escape character; ``bases`` are the base's own names (its tag, its
    image ID), allowed in ``FROM`` beside ``${BASE}``."""
    found = [p for escape in ESCAPES for p in _problems(instructions(text, escape), bases)]
    return min(found, key=lambda p: p.line) if found else None


def _problems(steps: list[Instruction], bases: Collection[str]) -> Iterator[Problem]:
    stages: list[str] = []  # each stage's alias, lower case ("" without one)
    for step in steps:
        flags, rest = _flags(step.args)
        if step.keyword == "VOLUME":
            yield Problem(
                step.line,
                "VOLUME: every sandbox of the image would get a writable place on the engine's "
                "disk, outside the read-only root and every cap",
                "build the environment without VOLUME",
            )
        elif step.keyword == "ONBUILD":
            yield Problem(
                step.line,
                "ONBUILD: its instructions would run in deltarun's own builds over this image",
                "build the environment without ONBUILD",
            )
        elif step.keyword == "FROM":
            words = rest.split()
            image = words[0] if words else ""
            allowed = image in BASE_ARG or image in bases or image.lower() == "scratch"
            if not (allowed or _stage(image, stages, False)):
                yield Problem(
                    step.line,
                    f"FROM {_shown(image)}: an environment builds on the sandbox base or an "
                    "earlier stage of its own Dockerfile; another image is outside the suite",
                    "start the Dockerfile with `ARG BASE` and `FROM ${BASE}`",
                )
            alias = words[2] if len(words) >= 3 and words[1].lower() == "as" else ""
            stages.append(alias.lower())
        elif step.keyword == "COPY" and "from" in flags:
            if not _stage(flags["from"], stages, True):
                yield Problem(
                    step.line,
                    f"COPY --from={_shown(flags['from'])}: another image is outside the suite",
                    "copy from an earlier stage of this Dockerfile, or from the context",
                )
        elif step.keyword == "ADD":
            yield from _add(step.line, rest)
        elif step.keyword == "RUN":
            for name in RUN_FLAGS_REFUSED:
                if name in flags:
                    yield Problem(
                        step.line,
                        f"RUN --{name}: a build step reaching the host's files, network or "
                        "privileges",
                        "drop the flag (`deltarun build --network` sets the build's network)",
                    )


def _add(line: int, rest: str) -> Iterator[Problem]:
    texts = [rest]
    if rest.lstrip().startswith("["):
        try:
            parsed = json.loads(rest)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            texts += [str(item) for item in parsed]
    for text in texts:
        if "$" in text:
            yield Problem(
                line,
                f"ADD {_shown(rest)}: a variable, which the engine expands to a URL as readily "
                "as to a path",
                "write the path out",
            )
            return
        if _REMOTE.search(_QUOTING.sub("", text)):
            yield Problem(
                line,
                f"ADD {_shown(rest)}: a remote source, which the engine fetches itself from "
                "this host's network whatever the build's --network",
                "put the file in the environment's folder and ADD or COPY it from there",
            )
            return


def _flags(args: str) -> tuple[dict[str, str], str]:
    """The leading ``--name=value`` flags (names lower case, values without quotes or
    escapes) and the rest of ``args``."""
    flags: dict[str, str] = {}
    word, rest = _word(args)
    while word.startswith("--"):
        name, _, value = word[2:].partition("=")
        flags[name.lower()] = _QUOTING.sub("", value)
        word, rest = _word(rest)
    return flags, f"{word} {rest}".strip()


def _stage(name: str, stages: list[str], by_index: bool) -> bool:
    """Whether ``name`` is an earlier stage: its alias, or (``--from``) its index."""
    if by_index and name.isascii() and name.isdigit():
        return int(name) < len(stages)
    return bool(name) and name.lower() in stages


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN else flat[: _SHOWN - 3] + "..."
