"""`--help` of the app and of every command renders as paragraphs at 80 columns: no line of
a help box or of a description is a fragment a hard line break cut short. The broker
options are one group, the same in every command that takes them, and reach the command
as one value."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from runner.cli import app
from runner.cli.common import BrokerFlags
from runner.cli.groups import OptionGroup, takes_groups
from runner.cli.help import ParagraphHelp, paragraphs
from tests.conftest import run_cli

WIDTH = 80
BROKER_FLAGS = ["--broker", "--broker-file", "--broker-ca", "--broker-cert", "--broker-key"]


def _pages(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group below ``group`` (a click group), as its words."""
    found = []
    for name, command in getattr(group, "commands", {}).items():
        if not getattr(command, "hidden", False):
            found.append((*prefix, name))
            found.extend(_pages(command, (*prefix, name)))
    return found


PAGES = [(), *_pages(typer.main.get_command(app))]


def _word_after(text: str, start: int) -> str:
    rest = text[start:].split()
    return rest[0] if rest else ""


def fragments(rendered: str) -> list[str]:
    """The lines of a rendered help page that end early although the next line goes on
    with the same paragraph: its first word would have fit. Inside a box a line goes on
    when the next row is blank up to a column where this line has text after a space (not
    the box's first column: that starts a new row); elsewhere when the next line has the
    same indent. The room is the widest text of that box (or of the lines
    outside boxes), so only a break no wrapping needed counts. A next line opening with
    ``[`` (Typer's ``[default: ...]``, ``[required]``) is its own item, not a continuation."""
    lines = rendered.splitlines()
    boxed = [line.startswith("│") and line.rstrip().endswith("│") for line in lines]
    cut: list[str] = []
    box: list[str] = []
    for index, line in enumerate([*lines, ""]):
        if index < len(lines) and boxed[index]:
            box.append(line.rstrip()[1:-1])
            continue
        if box:
            cut.extend(_cut_rows(box))
            box = []
    free = [
        line.rstrip() if not inside and not line.startswith(("╭", "╰")) else ""
        for line, inside in zip(lines, boxed, strict=True)
    ]
    room = max((len(line) for line in free), default=0)
    for this, following in pairwise(free):
        indent = len(following) - len(following.lstrip())
        if not this.strip() or not following.strip():
            continue
        if len(this) - len(this.lstrip()) != indent or following.lstrip().startswith("["):
            continue
        if len(this) + 1 + len(_word_after(following, indent)) <= room:
            cut.append(this)
    return cut


def _cut_rows(rows: list[str]) -> list[str]:
    room = max(len(row.rstrip()) for row in rows)
    first_column = min(len(row) - len(row.lstrip()) for row in rows if row.strip())
    cut = []
    for this, following in pairwise(rows):
        start = len(following) - len(following.lstrip())
        text = this.rstrip()
        continues = (
            following.strip()
            and first_column < start < len(text)
            and text[start - 1] == " "
            and text[start] != " "
            and not following.lstrip().startswith("[")
        )
        if continues and len(text) + 1 + len(_word_after(following, start)) <= room:
            cut.append(this)
    return cut


@pytest.mark.parametrize("page", PAGES, ids=lambda words: " ".join(words) or "deltarun")
def test_every_help_page_renders_as_paragraphs(page: tuple[str, ...]) -> None:
    width = str(WIDTH)
    result = run_cli(*page, "--help", env={"COLUMNS": width, "TERMINAL_WIDTH": width})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("╭─ Options") for line in lines), result.stdout
    assert max(len(line) for line in lines) <= WIDTH, result.stdout
    assert fragments(result.stdout) == [], result.stdout


BROKEN = """Write a minimal suite to start from: one repository task, one negative control, one
    answer task; controls with a no-op control, a gold patch arm and a command arm stub;
    build_suite.py (no make) that tars src/ correctly. Builds and seals it.

    Second paragraph wrapped at
    the source's width, then
    cut again."""


def _demo(cls: type[typer.core.TyperGroup] | None) -> str:
    """The help of a two-command app with today's `init` docstring, drawn by Typer."""
    demo = typer.Typer(cls=cls, add_completion=False)

    @demo.command(help=BROKEN)
    def first(
        flag: Annotated[bool, typer.Option("--flag", help="Short\nand\nbroken")] = False,
    ) -> None:
        """The command."""

    @demo.command()
    def second() -> None:
        """The other one."""

    runner = CliRunner(env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)})
    top = runner.invoke(demo, ["--help"], terminal_width=WIDTH)
    page = runner.invoke(demo, ["first", "--help"], terminal_width=WIDTH)
    assert top.exit_code == 0 and page.exit_code == 0, (top.output, page.output)
    return top.output + page.output


def test_the_check_finds_a_docstring_cut_by_hard_line_breaks() -> None:
    """Typer's own group keeps the docstring's breaks (the check finds them); the
    command line's ``ParagraphHelp`` reflows them."""
    assert len(fragments(_demo(None))) >= 2
    assert fragments(_demo(ParagraphHelp)) == []


def test_paragraphs_joins_lines_and_keeps_clicks_markers() -> None:
    assert paragraphs("a\n  b\n\n\n c\nd ") == "a b\n\nc d"
    assert paragraphs("a\nb\n\n\bkeep\nthese\n\fnot\nhelp") == "a b\n\n\bkeep\nthese"


def _options(command: object) -> list[tuple[list[str], str | None, object]]:
    return [
        (list(param.opts), getattr(param, "help", None), param.default)
        for param in getattr(command, "params", [])
        if any(opt.startswith("--broker") for opt in param.opts)
    ]


def test_the_broker_options_are_one_group_in_every_command_that_takes_them() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    takers = {name for name, command in commands.items() if _options(command)}
    assert takers == {"run", "validate", "status", "worker", "gc"}
    first = _options(commands["run"])
    assert [opts for opts, _, _ in first] == [[flag] for flag in BROKER_FLAGS]
    assert all(help_text and default is None for _, help_text, default in first)
    assert all(_options(commands[name]) == first for name in takers)


@dataclass(frozen=True)
class Pair(OptionGroup):
    left: Annotated[str, typer.Option("--left", help="The left one")] = "l"
    right: Annotated[int, typer.Option("--right", help="The right one")] = 0


def test_a_group_reaches_the_command_as_one_value_with_its_options_in_place() -> None:
    demo = typer.Typer(cls=ParagraphHelp, add_completion=False)
    seen: list[tuple[str, Pair, BrokerFlags, bool]] = []

    @demo.command()
    @takes_groups
    def both(
        name: Annotated[str, typer.Argument()],
        pair: Pair,
        *,
        broker: BrokerFlags,
        last: Annotated[bool, typer.Option("--last")] = False,
    ) -> None:
        seen.append((name, pair, broker, last))

    @demo.command()
    def other() -> None: ...

    runner = CliRunner()
    args = ["both", "n", "--right", "3", "--broker-file", "f", "--last"]
    assert runner.invoke(demo, args).exit_code == 0
    assert runner.invoke(demo, ["both", "m"]).exit_code == 0
    assert seen[0][0] == "n" and seen[0][1] == Pair("l", 3) and seen[0][3] is True
    assert seen[0][2].file is not None and seen[0][2].file.name == "f" and seen[0][2].named
    assert seen[1][1] == Pair() and seen[1][2] == BrokerFlags() and not seen[1][2].named
    command = typer.main.get_command(demo).commands["both"]  # type: ignore[attr-defined]
    order = [opt for param in command.params for opt in param.opts]
    assert order == ["name", "--left", "--right", *BROKER_FLAGS, "--last"]


def test_a_group_whose_option_names_clash_is_refused() -> None:
    def clashing(pair: Pair, pair_left: str = "") -> None: ...

    with pytest.raises(TypeError, match="option names given twice: pair_left"):
        takes_groups(clashing)
