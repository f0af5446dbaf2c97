"""SWE-bench-format suites and predictions, read into deltarun suites and arms.

``instances`` and ``predictions`` parse the files (pure); ``importer`` turns
instances and local clones into a suite of git-tree fixtures, hidden test files
and declared tests (``deltarun import swebench``).
"""
