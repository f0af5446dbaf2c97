"""Git patches as bytes, read the way ``git apply`` reads them. Pure.

Which files a patch touches decides what the harness keeps of it, so this
module follows git's own parser (``apply.c``: ``find_header``,
``parse_git_diff_header``, ``parse_fragment``, ``parse_binary``) instead of a
line-splitting approximation:

- lines end at ``\\n`` only (never at ``\\r``, ``\\x0b`` or ``\\x85``), and the
  patch is handled as bytes, so file names and contents that are not UTF-8 pass
  through unchanged;
- a hunk ends when the line counts of its ``@@ -a,b +c,d @@`` header are used
  up, not at the first line that looks like a header;
- a file section starts at a ``diff --git`` line or at a traditional
  ``---``/``+++`` pair followed by ``@@ -``;
- names are read as git writes them, whatever bytes they hold: C-quoted or
  bare, spaces included, each line ending a name where git's reader does
  (``names``); a section's paths are settled as ``parse_git_diff_header``
  settles them (``header``), the ``diff --git`` line naming the path only when
  no other line does (binary, mode-only and empty-file sections).

``parse`` is strict: it accepts what ``git diff --binary`` writes and nothing
else (no text between sections), which is what the harness stores. What it
cannot parse is an error, so a caller never applies a patch it did not read.
``touched_paths`` is lenient like ``git apply`` (junk between sections is
skipped, ``--recount`` semantics optional) and serves checks made before a
model-written patch is applied.

Memory stays proportional to the patch and the number of files, never to the
number of lines: hunks are measured with C-speed searches over the bytes.
"""

from runner.gitpatch.names import unquote
from runner.gitpatch.patch_error import PatchError
from runner.gitpatch.sections import FileDiff, keep, parse, touched_paths

__all__ = ["FileDiff", "PatchError", "keep", "parse", "touched_paths", "unquote"]
