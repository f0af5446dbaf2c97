"""The ``notes`` command line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional, Sequence

from notecli.store import NoteStore


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="notes")
    parser.add_argument("--store", type=Path, default=Path("notes.json"))
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add a note")
    add.add_argument("text")
    add.add_argument("--tag")
    show = sub.add_parser("list", help="list notes, newest first")
    show.add_argument("--tag")
    return parser


def main(argv: Optional[Sequence[str]] = None, out: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    store = NoteStore(args.store)
    lines = out if out is not None else []
    if args.command == "add":
        store.add(args.text, args.tag)
    elif args.command == "list":
        for note in reversed(store.load()):
            if args.tag is None or note["tag"] == args.tag:
                lines.append(note["text"])
    if out is None:
        print("\n".join(lines))
    return 0
