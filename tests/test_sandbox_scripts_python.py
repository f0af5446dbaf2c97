"""The scripts deltarun runs inside sandboxes run on the image's own Python, 3.6 or later
(an instance image may bring 3.6; SWE-bench's pin 3.9 for most of Verified): each parses
with Python 3.6's grammar and imports only the standard library, besides what its runner
brings (pytest for the pytest plugin, sympy for sympy's launcher)."""

from __future__ import annotations

import ast
import sys
from importlib import resources

import pytest

SCRIPTS = sorted(
    p.name for p in resources.files("runner.sandbox_scripts").iterdir() if p.name.endswith(".py")
)
# What each script may import beyond the standard library and its sibling scripts.
RUNNER_MODULES = {
    "deltarun_results.py": {"pytest"},
    "run_pytest.py": {"pytest"},
    "run_sympy.py": {"sympy"},
}


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s != "__init__.py"])
def test_a_sandbox_script_parses_as_python_3_6_and_imports_the_stdlib(name: str) -> None:
    source = resources.files("runner.sandbox_scripts").joinpath(name).read_text()
    tree = ast.parse(source, feature_version=(3, 6))
    siblings = {s[:-3] for s in SCRIPTS}
    allowed = set(sys.stdlib_module_names) | siblings | RUNNER_MODULES.get(name, set())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for module in names:
            assert module.split(".")[0] in allowed, f"{name} imports {module}"
    # Annotations a 3.6 interpreter evaluates at definition: no subscripted generics
    # (``list[str]``) or ``X | Y`` outside quotes.
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for annotation in [a.annotation for a in [*node.args.args, *node.args.kwonlyargs]]:
                assert not isinstance(annotation, (ast.Subscript, ast.BinOp)), (name, node.name)
            assert not isinstance(node.returns, (ast.Subscript, ast.BinOp)), (name, node.name)
