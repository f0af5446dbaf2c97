"""A SWE-bench-format dataset over real open-source Python projects, for `deltarun import
swebench` (build.py writes it; check_on_host.py verifies it without deltarun)."""
