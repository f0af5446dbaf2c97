"""Python source parsed with the standard ``ast`` module, one parse at a time. Pure.

CPython 3.11's AST constructor keeps a recursion count that two threads parsing at once can
corrupt ("SystemError: AST constructor recursion depth mismatch"). The local pool runs trials
in threads, and the verify phase parses the declared test files to write the canaries in,
so every parse, and every walk of the trees it gives, holds ``LOCK``.
"""

from __future__ import annotations

import threading

LOCK = threading.Lock()
