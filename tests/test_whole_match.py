"""Validation that matches a field whole: a value that reaches a Dockerfile, a shell or a
command line is refused in one line when it ends in a newline or holds one (or a NUL).

In Python's ``re``, ``$`` matches before a final newline, so ``re.match(r"^...$", value)``
passes ``"3.11\\n"``. deltarun's own regular expressions use ``\\A``/``\\Z`` and
``fullmatch``; pydantic's ``pattern=`` runs Rust's regex engine, where ``$`` is the end of
the text (checked here, field by field, so a change of engine cannot pass silently).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

import runner.config.arms
import runner.config.controls
import runner.config.gate_spec
import runner.config.runtime
import runner.records
from runner.errors import UsageError, UserError
from runner.suite.load import parse_task_line
from runner.swebench.specs import dockerfile, parse_specs
from tests.adversarial.hostile_kit import assert_refused, in_process

RUNNER = Path(__file__).resolve().parent.parent / "runner"
ENDINGS = ["\n", "\r", "\x00", "\r\n"]
INSTANCE: dict[str, Any] = {
    "instance_id": "acme__calc-1",
    "repo": "acme/calc",
    "base_commit": "a" * 40,
    "patch": "",
    "test_patch": "",
    "problem_statement": "Fix add().",
    "version": "1.0",
    "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
    "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
}


def variants(value: str) -> list[str]:
    """``value`` ended by, and split by, each line break and NUL."""
    middle = len(value) // 2 or 1
    found = [value + end for end in ENDINGS]
    return found + [value[:middle] + end + value[middle:] for end in ENDINGS]


def _compiled_patterns() -> list[tuple[str, int, str]]:
    """(file, line, pattern) of every ``re.compile`` in runner/ whose pattern ends in an
    unescaped ``$`` without ``re.MULTILINE``."""
    found = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("compile", "match", "search", "fullmatch")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str | bytes)
            ):
                continue
            pattern = node.args[0].value
            text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            flags += " ".join(ast.unparse(k.value) for k in node.keywords)
            ends = text.endswith("$") and not text.endswith("\\$")
            if ends and "MULTILINE" not in flags and "re.M" not in flags:
                found.append((str(path.relative_to(RUNNER.parent)), node.lineno, text))
    return found


def test_no_regular_expression_in_runner_ends_in_a_dollar() -> None:
    assert _compiled_patterns() == []


EXAMPLES = {
    ("Runtime", "python"): "3.11",
    ("Route", "base_url"): "http://127.0.0.1:8080/v1",
    ("Route", "api_key_env"): "OPENAI_API_KEY",
    ("InstalledAgent", "name"): "aider",
    ("InstalledAgent", "version"): "0.86.1",
    ("Arm", "name"): "candidate",
}


def _pattern_fields() -> dict[tuple[str, str], TypeAdapter[Any]]:
    found = {}
    for module in (
        runner.config.arms,
        runner.config.controls,
        runner.config.gate_spec,
        runner.config.runtime,
        runner.records,
    ):
        for name, cls in vars(module).items():
            if not (inspect.isclass(cls) and issubclass(cls, BaseModel)):
                continue
            if cls.__module__ != module.__name__:
                continue
            for field, info in cls.model_fields.items():
                if any(getattr(meta, "pattern", None) for meta in info.metadata):
                    annotated = Annotated[info.annotation, *info.metadata]  # type: ignore[valid-type]
                    found[(name, field)] = TypeAdapter(annotated, config=cls.model_config)
    return found


def test_every_pydantic_pattern_matches_the_whole_value() -> None:
    fields = _pattern_fields()
    assert set(fields) == set(EXAMPLES), "give each field with a pattern an example here"
    for key, adapter in fields.items():
        adapter.validate_python(EXAMPLES[key])
        for bad in variants(EXAMPLES[key]):
            with pytest.raises(ValidationError):
                adapter.validate_python(bad)


def test_task_line_fields_are_matched_whole() -> None:
    line = {"id": "t1", "kind": "ordinary", "prompt": "p", "repo": "fixtures/t1.tar"}
    line |= {"hidden": "hidden/t1.tar", "hidden_tests": ["tests/test_a.py"]}
    parse_task_line(json.dumps(line), "tasks.jsonl:1")
    pins = {
        "id": "t1",
        "repo_sha256": "a" * 64,
        "hidden_sha256": "b" * 64,
        "environment": "env",
        "environment_sha256": "c" * 64,
        "environment_image": "sha256:" + "d" * 64,
    }
    base = {**line, **pins}
    parse_task_line(json.dumps(base), "tasks.jsonl:1")
    for field, value in pins.items():
        for bad in variants(value):
            with pytest.raises(UserError, match=r"tasks.jsonl:1: .*") as info:
                parse_task_line(json.dumps({**base, field: bad}), "tasks.jsonl:1")
            assert "\n" not in str(info.value)
    git = {**line, "repo": {"git": "repos/a.bundle", "commit": "e" * 40}, "repo_tree": "f" * 40}
    parse_task_line(json.dumps(git), "tasks.jsonl:1")
    for bad in variants("e" * 40):
        with pytest.raises(UserError, match="x:1: repo"):
            parse_task_line(json.dumps({**git, "repo": {**git["repo"], "commit": bad}}), "x:1")
    for bad in variants("f" * 40):
        with pytest.raises(UserError, match="repo_tree"):
            parse_task_line(json.dumps({**git, "repo_tree": bad}), "x:1")


def _import(tmp_path: Path, instance: dict[str, Any], specs: str | None = None) -> list[str]:
    (tmp_path / "repos").mkdir(exist_ok=True)
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(instance) + "\n")
    args = ["import", "swebench", str(instances), "--repos", str(tmp_path / "repos")]
    args += ["--out", str(tmp_path / "out")]
    if specs is not None:
        (tmp_path / "specs.yaml").write_text(specs)
        args += ["--specs", str(tmp_path / "specs.yaml")]
    return args


INSTANCE_FIELDS = {
    "instance_id": "instance_id",
    "repo": "repo",
    "base_commit": "base_commit",
    "version": "version",
    "FAIL_TO_PASS": "FAIL_TO_PASS",
    "PASS_TO_PASS": "PASS_TO_PASS",
}


@pytest.mark.parametrize("field", sorted(INSTANCE_FIELDS))
def test_instance_fields_with_a_line_break_are_refused_at_import(
    tmp_path: Path, field: str
) -> None:
    value = INSTANCE[field]
    for bad in variants(value[0] if isinstance(value, list) else value):
        row = {**INSTANCE, field: [bad] if isinstance(value, list) else bad}
        line = assert_refused(in_process(*_import(tmp_path, row)), 1, "instances.jsonl")
        assert INSTANCE_FIELDS[field] in line, line
        assert not (tmp_path / "out").exists()


SPEC_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    # key: (a valid string, where it goes in the spec)
    "pip_packages": ("pytest-cov==5.0.0", lambda value: [value]),
    "python": ("3.11", lambda value: value),
    "install": ("python -m pip install -e .", lambda value: value),
    "pre_install": ("sed -i 's/a/b/' setup.cfg", lambda value: [value]),
    "test_cmd": ("pytest -rA", lambda value: value),
    "env_vars.key": ("TZ", lambda value: {value: "UTC"}),
    "env_vars.value": ("UTC", lambda value: {"TZ": value}),
}


def _specs(key: str, value: str) -> str:
    name = key.split(".")[0]
    return yaml.safe_dump({"acme/calc": {"1.0": {name: SPEC_FIELDS[key][1](value)}}})


@pytest.mark.parametrize("key", sorted(SPEC_FIELDS))
def test_spec_fields_with_a_line_break_never_reach_a_dockerfile(tmp_path: Path, key: str) -> None:
    valid, _ = SPEC_FIELDS[key]
    word = key.split(".")[0]
    assert parse_specs(_specs(key, valid), "specs.yaml").of("acme/calc", "1.0") is not None
    for bad in variants(valid):
        with pytest.raises(UsageError, match=word):
            parse_specs(_specs(key, bad), "specs.yaml")
        args = _import(tmp_path, INSTANCE, _specs(key, bad))
        line = assert_refused(in_process(*args), 2, "specs.yaml")
        assert "acme/calc 1.0" in line and word in line, line
        assert not (tmp_path / "out").exists()


INSTRUCTION = re.compile(r"(FROM|USER|RUN|COPY|ENV) \S")


def _near_valid(valid: str) -> st.SearchStrategy[str]:
    """``valid`` with text (line breaks, NUL and other characters among it) put in."""
    noise = st.text(alphabet=st.sampled_from("\n\r\x00\t $\\\"'a=é\u2028"), max_size=2)
    return st.tuples(st.integers(0, len(valid)), noise).map(
        lambda cut: valid[: cut[0]] + cut[1] + valid[cut[0] :]
    )


SPEC_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "install": _near_valid("pip install -e ."),
    "python": _near_valid("3.11"),
    "pip_packages": st.lists(_near_valid("pytest-cov==5.0.0"), max_size=2),
    "env_vars": st.dictionaries(_near_valid("TZ"), _near_valid("UTC"), max_size=2),
    "test_cmd": _near_valid("pytest -rA"),
}


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(sorted(SPEC_VALUES)).flatmap(lambda k: SPEC_VALUES[k].map(lambda v: {k: v})))
def test_every_spec_parse_accepts_makes_a_dockerfile_of_whole_lines(raw: dict[str, Any]) -> None:
    """Whatever strings a spec holds, the Dockerfile made of an accepted one has one
    instruction a line (an ENV value with a line break would start a line of its own)."""
    try:
        spec = parse_specs(json.dumps({"acme/calc": {"1.0": raw}}), "specs.json").of(
            "acme/calc", "1.0"
        )
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert spec is not None
    text = dockerfile(spec, "deltarun/sandbox-python:bookworm", bool(spec.pip_packages))
    lines = text.split("\n")  # Docker's parser ends a line at \n (and \r\n) only
    assert lines.pop() == ""
    for line in lines:
        assert INSTRUCTION.match(line) and "\r" not in line, line


def test_env_values_reach_the_image_as_written() -> None:
    """Docker's ENV expands ``$NAME`` and reads JSON's ``\\uXXXX`` as text: both are kept
    out (``$`` escaped, characters written as they are)."""
    spec = parse_specs(
        yaml.safe_dump({"a/b": {"1": {"env_vars": {"A": 'x$HOME é \\ "q"'}}}}), "s"
    ).of("a/b", "1")
    assert spec is not None
    assert 'ENV A="x\\$HOME é \\\\ \\"q\\""' in dockerfile(spec, "base", wheels=False)


def test_commands_and_test_ids_in_a_task_line_are_one_line_each() -> None:
    line = {"id": "t1", "kind": "ordinary", "prompt": "p", "repo": "fixtures/t1.tar"}
    line |= {"hidden": "hidden/t1.tar", "hidden_tests": ["tests/test_a.py"]}
    fields = {
        "install": ["python3 -m pip install -e ."],
        "pytest_args": ["-p", "no:cacheprovider"],
        "hidden_tests": ["tests/test_a.py::test_b"],
    }
    parse_task_line(json.dumps({**line, **fields}), "tasks.jsonl:1")
    for field, values in fields.items():
        for bad in variants(values[-1]):
            with pytest.raises(UserError, match=field):
                parse_task_line(json.dumps({**line, **fields, field: [bad]}), "tasks.jsonl:1")


def test_a_failed_install_step_is_read_from_the_harness_line_only() -> None:
    """The step's own echo and the project's output may hold the words: only the line the
    harness writes, matched whole, names the step."""
    from runner.trees.install import failure

    steps = ["echo ok", "echo install failed here"]
    output = "\n".join(
        [
            "[deltarun] install step 1: 'echo ok'",
            "[deltarun] install step 2: 'echo install failed here'",
            "[deltarun] install step x failed (exit 1)",  # from setup.py
            "[deltarun] install step 1 failed (exit 9) and more",
            "boom",
            "[deltarun] install step 2 failed (exit 3)",
        ]
    )
    assert failure(steps, output, 3, False).startswith(
        "install step `echo install failed here` failed (exit 3): "
    )
