"""The CI templates in examples/ci/ run: each job's steps executed in order on this
machine by ``tests/ci_driver.py`` (the YAML parsed; only the CI service's own ``uses:``
actions not run), in a copy of the repository as a checkout would give it, on the real
Docker engine. GitHub Actions: a passing gate (exit 0, JUnit, the step summary, the run
directory, deltarun's cache filled where the cache step looks), and a regression failing
the job (exit 1). GitLab CI: the same pass through its script, its JUnit report and
artifacts, from a cached images archive; "not decided" (exit 5) an allowed failure. The
fleet workflow: the trials run by a real ``deltarun worker`` through a real Redis over
TLS, the secrets never in the job's output, and a null candidate "not decided" (exit 5)
shown as a warning annotation, not a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.ci_driver import GitHubJob, GitLabJob, Job, load

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("money-half-up", "roman-strict-parse", "slugify-accents", "wrap-long-words")
IMAGES = (
    "deltarun/base:bookworm",
    "deltarun/sandbox-python:bookworm",
    "deltarun/model-proxy:bookworm",
)
NOTE = (
    "diff --git a/NOTES.md b/NOTES.md\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/NOTES.md\n"
    "@@ -0,0 +1 @@\n"
    "+Looked at it; nothing to change.\n"
)


def checkout(tmp_path: Path) -> Path:
    """What a checkout of this repository gives (tracked files and new ones not ignored;
    nothing built), with this repository's .venv so that `make setup` finds it made."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    repo = tmp_path / "repo"
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, repo / name
        if source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(source))
        elif source.is_file():  # not: deleted in the work tree and not yet committed
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (repo / ".venv").symlink_to(ROOT / ".venv")
    assert not (repo / "examples" / "ci" / "suite").exists()  # the job builds it
    return repo


def null_candidate(repo: Path) -> None:
    """The pull request's agent fixes nothing (it only leaves a note)."""
    example = repo / "examples" / "ci"
    (example / "no-fix").mkdir()
    for task in TASKS:
        (example / "no-fix" / f"{task}.diff").write_text(NOTE)
    controls = example / "controls.yaml"
    fixer = "agent: {type: patch, dir: patches/gold}"
    assert controls.read_text().count(fixer) == 1
    controls.write_text(controls.read_text().replace(fixer, "agent: {type: patch, dir: no-fix}"))


def regression(repo: Path) -> None:
    """The main branch's agent (the control) fixes every task, the pull request's none."""
    null_candidate(repo)
    controls = repo / "examples" / "ci" / "controls.yaml"
    noop = "agent: {type: scripted, action: noop}"
    assert controls.read_text().count(noop) == 1
    controls.write_text(
        controls.read_text().replace(noop, "agent: {type: patch, dir: patches/gold}")
    )


def uploaded_paths(job: Job, workspace: Path) -> list[Path]:
    paths: list[Path] = []
    for step in job.steps:
        if step.uses and step.uses.startswith("actions/upload-artifact"):
            paths += [workspace / line for line in str(step.with_["path"]).split() if line]
    return paths


def check_gate_files(example: Path, decision: str, failures: int, skipped: int) -> None:
    suite = ET.parse(example / "gate.xml").getroot().find("testsuite[@name='candidate']")
    assert suite is not None, (example / "gate.xml").read_text()
    assert (suite.get("failures"), suite.get("skipped")) == (str(failures), str(skipped))
    cases = {case.get("name") for case in suite.iter("testcase")}
    assert cases == {"non_inferiority", "error_rate_max"}
    assert (example / "runs" / "pr" / "trials.jsonl").read_text().count("\n") == 2 * len(TASKS)
    stored = json.loads((example / "runs" / "pr" / "decision.json").read_text())
    assert stored["decision"] == decision


def test_github_actions_workflow_runs_and_passes_the_gate(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    workflow = repo / "examples" / "ci" / "github-actions.yml"
    job = GitHubJob(workflow, "gate", workspace=repo, temp=runner_temp).run()
    assert job.status == "success", job.output()
    ran = [step.name for step in job.steps if step.status == "success"]
    assert ran == [
        "load the cached images",
        "set deltarun up",
        "save the images for the next job",
        "build the suite",
        "run the suite",
        "gate",
    ]
    not_run = [step.uses for step in job.steps if step.status == "action"]
    assert not_run == [
        "actions/checkout@v4",
        "actions/cache@v4",
        "actions/cache@v4",
        "actions/upload-artifact@v4",
        "mikepenz/action-junit-report@v4",
    ]
    assert job.outputs["gate"] == {"exit_code": "0"}
    assert "gate: PASS (exit 0)" in job.step("gate").output
    assert job.annotations == []
    example = repo / "examples" / "ci"
    check_gate_files(example, "pass", failures=0, skipped=0)
    summary = (runner_temp / "step_summary.md").read_text()
    assert summary == (example / "gate.md").read_text()
    assert "**candidate** helped 4:" in summary
    uploaded = uploaded_paths(job, repo)
    assert uploaded == [example / "gate.xml", example / "gate.md", example / "runs" / "pr"]
    for path in uploaded:
        assert path.exists(), path
    # what the cache steps save was written where they look: deltarun's cache holds the
    # staged fixtures, the images archive the three images (the GitLab test loads one)
    cache_steps = [step for step in job.steps if step.uses == "actions/cache@v4"]
    cached = [repo / str(step.with_["path"]) for step in cache_steps]
    assert cached == [repo / ".ci-cache" / "deltarun", repo / ".ci-cache" / "images"]
    assert any((cached[0] / "staged").iterdir())
    with tarfile.open(cached[1] / "deltarun-images.tar") as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        tags = {tag for image in json.load(member) for tag in image["RepoTags"] or []}
    assert tags == set(IMAGES)


def test_github_actions_workflow_fails_on_a_regression(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    regression(repo)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    workflow = repo / "examples" / "ci" / "github-actions.yml"
    job = GitHubJob(workflow, "gate", workspace=repo, temp=runner_temp).run()
    assert job.status == "failure", job.output()
    gate = job.step("gate")
    assert (gate.status, gate.exit_code) == ("failure", 1), gate.output
    assert "gate: FAIL (exit 1)" in gate.output
    assert job.outputs["gate"] == {"exit_code": "1"}
    assert job.annotations == []
    example = repo / "examples" / "ci"
    check_gate_files(example, "fail", failures=1, skipped=0)
    assert "FAIL" in (runner_temp / "step_summary.md").read_text()
    # the upload runs whatever happened (if: always()), and what it names is there
    upload = next(step for step in job.steps if step.uses == "actions/upload-artifact@v4")
    assert upload.status == "action"
    workflow_steps = load(workflow)["jobs"]["gate"]["steps"]
    assert next(s for s in workflow_steps if s.get("uses") == upload.uses)["if"] == "always()"
    for path in uploaded_paths(job, repo):
        assert path.exists(), path


def test_gitlab_job_not_decided_is_an_allowed_failure(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    null_candidate(repo)
    pipeline = repo / "examples" / "ci" / "gitlab-ci.yml"
    job = GitLabJob(pipeline, "deltarun-gate", project_dir=repo).run()
    assert (job.status, job.exit_code) == ("warning", 5), job.output()
    assert "gate: NOT DECIDED (exit 5)" in job.output()
    check_gate_files(repo / "examples" / "ci", "undecided", failures=0, skipped=1)


def test_gitlab_job_runs_and_reports_junit(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    pipeline = repo / "examples" / "ci" / "gitlab-ci.yml"
    spec = load(pipeline)["deltarun-gate"]
    assert spec["allow_failure"] == {"exit_codes": [5]}
    # a cache hit for the images: what the cache restores is an earlier job's archive
    archive = repo / ".ci-cache" / "images" / "deltarun-images.tar"
    archive.parent.mkdir(parents=True)
    subprocess.run(["docker", "save", "-o", str(archive), *IMAGES], check=True)
    saved = archive.stat().st_mtime_ns
    job = GitLabJob(pipeline, "deltarun-gate", project_dir=repo).run()
    assert (job.status, job.exit_code) == ("success", 0), job.output()
    assert job.output().count("Loaded image") == len(IMAGES)  # docker load -q, one each
    assert archive.stat().st_mtime_ns == saved  # not saved again on a hit
    assert "gate: PASS (exit 0)" in job.output()
    example = repo / "examples" / "ci"
    check_gate_files(example, "pass", failures=0, skipped=0)
    artifacts = spec["artifacts"]
    for name in [*artifacts["paths"], artifacts["reports"]["junit"]]:
        assert (repo / name).exists(), name
    for entry in spec["cache"]:
        for name in entry["paths"]:
            assert any((repo / name).iterdir()), name


def test_fleet_workflow_runs_on_a_worker_and_marks_not_decided(tmp_path: Path) -> None:
    from tests.conftest import IN_CI
    from tests.distributed_support import RedisServer, make_secrets, session_key, start_worker

    for tool in ("redis-server", "openssl"):
        if shutil.which(tool) is None:
            message = f"{tool} is not installed; run `make redis`"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
    repo = checkout(tmp_path)
    null_candidate(repo)  # not decided on 4 tasks
    secrets_dir = make_secrets(tmp_path / "secrets")
    server = RedisServer(tmp_path / "redis", tls=secrets_dir)
    server.start()
    password = server.url.split(":")[2].split("@")[0]
    worker = None
    try:
        worker = start_worker(
            server,
            tmp_path / "worker.log",
            "-c",
            "2",
            broker=["--broker", server.url, *server.tls_args()],
        )
        secrets = {
            "DELTARUN_BROKER_URL": server.url,
            "DELTARUN_BROKER_CA": (secrets_dir / "ca.crt").read_text(),
            "DELTARUN_BROKER_CERT": (secrets_dir / "client.crt").read_text(),
            "DELTARUN_BROKER_KEY": (secrets_dir / "client.key").read_text(),
            "DELTARUN_JOB_KEY": session_key().decode(),
        }
        runner_temp = tmp_path / "runner-temp"
        runner_temp.mkdir()
        # the runner's own environment holds no broker or job key: only the secrets do
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("DELTARUN_BROKER") and not k.startswith("DELTARUN_JOB_KEY")
        }
        workflow = repo / "examples" / "ci" / "github-actions-fleet.yml"
        job = GitHubJob(
            workflow, "gate-fleet", repo, runner_temp, secrets=secrets, base_env=base_env
        ).run()
        worker_log = worker.text()
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
    assert job.status == "success", job.output()
    assert job.outputs["gate"] == {"exit_code": "5"}
    assert "gate: NOT DECIDED (exit 5)" in job.step("gate").output, job.step("gate").output
    assert len(job.annotations) == 1 and job.annotations[0].startswith(
        "::warning title=deltarun gate::not decided (exit 5)"
    )
    # the trials ran on the worker, and the secrets never reached the job's output
    example = repo / "examples" / "ci"
    records = [json.loads(line) for line in (example / "runs/pr/trials.jsonl").open()]
    assert {(r["worker"], r["outcome"]) for r in records} == {("w1", "miss")}
    assert worker_log.count(": miss ") == 2 * len(TASKS)  # "trial <job> <arm> <task>: miss"
    output = job.output()
    assert "rediss://deltarun:***@" in output
    for secret in (password, secrets["DELTARUN_JOB_KEY"], secrets["DELTARUN_BROKER_KEY"]):
        assert secret.strip() not in output
    assert not (runner_temp / "deltarun-broker").exists()  # removed at the end
    check_gate_files(example, "undecided", failures=0, skipped=1)
    assert "NOT DECIDED" in (runner_temp / "step_summary.md").read_text()
