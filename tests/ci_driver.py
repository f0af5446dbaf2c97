"""Run a CI template's job on this machine: the YAML parsed, its shell steps run in order.

A small stand-in for a GitHub Actions runner and a GitLab shell executor, enough to
exercise ``examples/ci/``: each ``run:`` step (GitHub) or the job's ``script:`` (GitLab)
runs in ``bash -eo pipefail`` with the environment the service gives (``CI=true``, the
workspace, ``$GITHUB_STEP_SUMMARY``, ``$GITHUB_OUTPUT``, ``$GITHUB_ENV``, ``$GITHUB_PATH``
and ``::warning`` annotations; GitLab's ``CI_PROJECT_DIR``, ``variables:`` and
``allow_failure: exit_codes``). Only the steps that are the service's own actions
(``uses:``: checkout, cache, upload-artifact, test reporters) are not run; they are
returned, so a test can check that the paths they name exist after the job.

The ``${{ }}`` expressions understood are plain context lookups (``github.*``,
``runner.*``, ``env.*``, ``secrets.*``, ``vars.*``, ``steps.<id>.outputs.*``) and the
status functions in ``if:`` (``always()``, ``success()``, ``failure()``, ``cancelled()``);
any other expression is an error, so a template cannot silently rely on more.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
LOOKUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)+$")
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class TemplateError(Exception):
    """The template asks for something this driver (and so the test) does not model."""


@dataclass
class Step:
    name: str
    status: str  # "success" | "failure" | "skipped" | "action" (a uses: step, not run)
    exit_code: int | None = None
    output: str = ""
    uses: str | None = None
    with_: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """A job's result as the CI service would show it."""

    status: str  # "success" | "failure" | "warning" (GitLab: an allowed failure)
    exit_code: int
    steps: list[Step]
    outputs: dict[str, dict[str, str]]
    annotations: list[str]

    def output(self) -> str:
        return "".join(step.output for step in self.steps)

    def step(self, name: str) -> Step:
        return next(step for step in self.steps if step.name == name)


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: not a YAML mapping")
    # YAML 1.1 reads GitHub's `on:` key as True; keep it under its name.
    if True in data:
        data["on"] = data.pop(True)
    return data


def _shell(script: str, cwd: Path, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    done = subprocess.run(
        [*BASH, "-c", script],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout


def _read_pairs(path: Path) -> dict[str, str]:
    """``NAME=value`` lines and ``NAME<<EOF`` blocks, as $GITHUB_OUTPUT and $GITHUB_ENV hold."""
    pairs: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, marker = line.split("<<", 1)
            block: list[str] = []
            while index < len(lines) and lines[index] != marker:
                block.append(lines[index])
                index += 1
            index += 1
            pairs[name] = "\n".join(block)
        elif "=" in line:
            name, value = line.split("=", 1)
            pairs[name] = value
    return pairs


class GitHubJob:
    """One job of a GitHub Actions workflow, run as a self-hosted runner would run it."""

    def __init__(
        self,
        workflow: Path,
        job: str,
        workspace: Path,
        temp: Path,
        secrets: Mapping[str, str] | None = None,
        variables: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        data = load(workflow)
        self.workflow = data
        self.job = data["jobs"][job]
        self.workspace = workspace
        self.temp = temp
        self.secrets = dict(secrets or {})
        self.vars = dict(variables or {})
        self.summary = temp / "step_summary.md"
        self.env: dict[str, str] = {
            **(base_env if base_env is not None else os.environ),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_RUN_ID": "4242",
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "RUNNER_TEMP": str(temp),
            "RUNNER_OS": "Linux",
        }
        self.outputs: dict[str, dict[str, str]] = {}
        self.path_prefix: list[str] = []

    def _context(self, name: str, env: Mapping[str, str]) -> str:
        parts = name.split(".")
        head, rest = parts[0], parts[1:]
        if head == "github" and rest == ["workspace"]:
            return str(self.workspace)
        if head == "github" and rest == ["run_id"]:
            return self.env["GITHUB_RUN_ID"]
        if head == "runner" and rest == ["temp"]:
            return str(self.temp)
        if head == "runner" and rest == ["os"]:
            return "Linux"
        if head == "env" and len(rest) == 1:
            return env.get(rest[0], "")
        if head == "secrets" and len(rest) == 1:
            return self.secrets.get(rest[0], "")
        if head == "vars" and len(rest) == 1:
            return self.vars.get(rest[0], "")
        if head == "steps" and len(rest) == 3 and rest[1] == "outputs":
            return self.outputs.get(rest[0], {}).get(rest[2], "")
        raise TemplateError(f"expression not modelled: ${{{{ {name} }}}}")

    def expand(self, text: str, env: Mapping[str, str]) -> str:
        def one(match: re.Match[str]) -> str:
            expression = match.group(1)
            if not LOOKUP.match(expression):
                raise TemplateError(f"expression not modelled: ${{{{ {expression} }}}}")
            return self._context(expression, env)

        return EXPRESSION.sub(one, text)

    def _runs(self, condition: Any, failed: bool) -> bool:
        if condition is None:
            return not failed
        text = str(condition).strip()
        text = EXPRESSION.sub(lambda m: m.group(1), text).strip()
        table = {
            "always()": True,
            "success()": not failed,
            "failure()": failed,
            "cancelled()": False,
        }
        if text not in table:
            raise TemplateError(f"if: not modelled: {condition}")
        return table[text]

    def _env_block(self, block: Mapping[str, Any] | None, env: dict[str, str]) -> None:
        for name, value in (block or {}).items():
            env[name] = self.expand(str(value), env)

    def run(self, timeout: float = 900) -> Job:
        env = dict(self.env)
        self._env_block(self.workflow.get("env"), env)
        self._env_block(self.job.get("env"), env)
        defaults = {
            **((self.workflow.get("defaults") or {}).get("run") or {}),
            **((self.job.get("defaults") or {}).get("run") or {}),
        }
        if defaults.get("shell", "bash") != "bash":
            raise TemplateError(f"shell not modelled: {defaults['shell']}")
        steps: list[Step] = []
        annotations: list[str] = []
        failed = False
        for index, spec in enumerate(self.job["steps"]):
            name = spec.get("name") or spec.get("uses") or f"step {index + 1}"
            if "uses" in spec:
                steps.append(Step(name, "action", uses=spec["uses"], with_=spec.get("with", {})))
                continue
            if not self._runs(spec.get("if"), failed):
                steps.append(Step(name, "skipped"))
                continue
            if spec.get("shell", "bash") != "bash":
                raise TemplateError(f"{name}: shell not modelled: {spec['shell']}")
            step_env = dict(env)
            self._env_block(spec.get("env"), step_env)
            step_env["PATH"] = os.pathsep.join([*self.path_prefix, env.get("PATH", "")])
            files = {}
            for var in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH"):
                files[var] = self.temp / f"{var.lower()}_{index}"
                files[var].write_text("")
                step_env[var] = str(files[var])
            folder = spec.get("working-directory", defaults.get("working-directory", "."))
            cwd = self.workspace / self.expand(str(folder), step_env)
            code, text = _shell(self.expand(spec["run"], step_env), cwd, step_env, timeout)
            annotations += [line for line in text.splitlines() if line.startswith("::")]
            if "id" in spec:
                self.outputs[spec["id"]] = _read_pairs(files["GITHUB_OUTPUT"])
            env.update(_read_pairs(files["GITHUB_ENV"]))
            added = [line for line in files["GITHUB_PATH"].read_text().splitlines() if line]
            self.path_prefix = [*reversed(added), *self.path_prefix]
            ok = code == 0 or bool(spec.get("continue-on-error", False))
            steps.append(Step(name, "success" if code == 0 else "failure", code, text))
            failed = failed or not ok
        return Job(
            status="failure" if failed else "success",
            exit_code=1 if failed else 0,
            steps=steps,
            outputs=self.outputs,
            annotations=annotations,
        )


class GitLabJob:
    """One job of a ``.gitlab-ci.yml``, run as a shell executor would run it."""

    def __init__(
        self,
        pipeline: Path,
        job: str,
        project_dir: Path,
        variables: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        data = load(pipeline)
        self.pipeline = data
        self.job = data[job]
        self.project_dir = project_dir
        self.env: dict[str, str] = {
            **(base_env if base_env is not None else os.environ),
            "CI": "true",
            "GITLAB_CI": "true",
            "CI_PROJECT_DIR": str(project_dir),
            "CI_JOB_ID": "4242",
            "CI_PIPELINE_ID": "4241",
            "CI_COMMIT_REF_SLUG": "test",
            # CI/CD variables set in the project's settings (masked ones included)
            **(variables or {}),
        }

    def _variables(self, block: Mapping[str, Any] | None, env: dict[str, str]) -> None:
        for name, value in (block or {}).items():
            if isinstance(value, dict):
                value = value.get("value", "")
            env[name] = VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), str(value))

    def _lines(self, key: str) -> list[str]:
        value = self.job.get(key, self.pipeline.get("default", {}).get(key, []))
        if isinstance(value, str):
            return [value]
        return [str(line) for line in value]

    def run(self, timeout: float = 900) -> Job:
        env = dict(self.env)
        self._variables(self.pipeline.get("variables"), env)
        self._variables(self.job.get("variables"), env)
        steps: list[Step] = []
        script = "\n".join([*self._lines("before_script"), *self._lines("script")])
        code, text = _shell(script, self.project_dir, env, timeout)
        steps.append(Step("script", "success" if code == 0 else "failure", code, text))
        after = self._lines("after_script")
        if after:
            after_code, after_text = _shell("\n".join(after), self.project_dir, env, timeout)
            steps.append(Step("after_script", "success", after_code, after_text))
        allowed = self.job.get("allow_failure", False)
        if isinstance(allowed, dict):
            allowed_codes = {int(c) for c in allowed.get("exit_codes", [])}
            allowed_any = False
        else:
            allowed_codes, allowed_any = set(), bool(allowed)
        if code == 0:
            status = "success"
        elif allowed_any or code in allowed_codes:
            status = "warning"
        else:
            status = "failure"
        return Job(status=status, exit_code=code, steps=steps, outputs={}, annotations=[])
