"""Instance images as sandboxes (``runner.sandbox.instance_layer``, ``instance_images``,
``runner.swebench.from_images``): an image in SWE-bench's layout, built offline here from
Debian bullseye (Python 3.9; ``tests/fixtures/instance_image``), served by a loopback
registry, imported with ``--instance-image`` (pulled, its repository taken out as the
fixture, adapted), validated and run with the real engine.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from runner.errors import DigestMismatch, UserError
from runner.sandbox.base import ROOT_USER, ExecRequest, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.instance_images import InstanceImages
from runner.sandbox.instance_layer import (
    PATH_LABEL,
    adapter_dockerfile,
    environment_path,
    left_out,
    path_of_label,
    reference_of,
    with_path,
)
from tests.conftest import IN_CI, leftover_sandboxes, path_lock, run_cli
from tests.test_registry import RegistryServer

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = ROOT / "tests" / "fixtures" / "instance_image"
BASE = "deltarun/base:bullseye"
INSTANCE = "tinycalc__tinycalc-1"
GOLD = """\
diff --git a/src/tinycalc/__init__.py b/src/tinycalc/__init__.py
--- a/src/tinycalc/__init__.py
+++ b/src/tinycalc/__init__.py
@@ -9,4 +9,4 @@ def clamp(value, low, high):
     \"\"\"``value`` held between ``low`` and ``high``.\"\"\"
     if value < low:
         return low
-    return value
+    return min(value, high)
"""
TEST_PATCH = """\
diff --git a/tests/test_calc.py b/tests/test_calc.py
--- a/tests/test_calc.py
+++ b/tests/test_calc.py
@@ -3,3 +3,9 @@ from tinycalc import add
\x20
 def test_add():
     assert add(2, 3) == 5
+
+
+def test_clamp_high():
+    from tinycalc import clamp
+
+    assert clamp(12, 0, 10) == 10
"""


# --- the layer and its label, pure ------------------------------------------------------


def test_templates_name_swebench_and_epoch_layouts() -> None:
    assert (
        reference_of("swebench", "django__django-11099", "django/django", "3.0")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert (
        reference_of("epoch", "django__django-11099", "django/django", "3.0")
        == "ghcr.io/epoch-research/swe-bench.eval.x86_64.django__django-11099:latest"
    )
    assert (
        reference_of("127.0.0.1:5000/{repo}:{version}", "a__b-1", "Owner/Name", "1.2")
        == "127.0.0.1:5000/owner/name:1.2"
    )
    with pytest.raises(UserError, match="unknown placeholder"):
        reference_of("x/{instance}:1", "a__b-1", "a/b", "1")
    with pytest.raises(UserError, match="is not an image reference"):
        reference_of("x/{version}", "a__b-1", "a/b", "1 ; rm")


def test_the_environment_is_the_images_own_path_never_where_a_sandbox_writes() -> None:
    standard = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert environment_path(standard, True) == ("/opt/miniconda3/envs/testbed/bin",)
    assert environment_path("/opt/venv/bin:" + standard, False) == ("/opt/venv/bin",)
    odd = "/home/u/.local/bin:bin:/opt/venv/bin/:/tmp/x:/opt/venv/bin:" + standard
    assert environment_path(odd, False) == ("/opt/venv/bin",)
    assert left_out(odd) == ("/home/u/.local/bin", "bin", "/tmp/x")
    for bad in ("/workspace/bin", "/tmp/x", "/home/agent/.local/bin", "relative", "/a/../tmp"):
        with pytest.raises(UserError, match="cannot be on a sandbox's PATH"):
            path_of_label(f"/opt/env/bin:{bad}")
    with pytest.raises(UserError, match="repository's path"):
        path_of_label("/testbed/.venv/bin", "/testbed")
    assert path_of_label(None) == ()
    assert with_path("/usr/bin:/bin", ("/opt/e/bin",)) == "/opt/e/bin:/usr/bin:/bin"


def test_the_layer_adds_the_agent_strips_setuid_and_links_the_repository() -> None:
    text = adapter_dockerfile("sha256:" + "a" * 64, "x/y:1", "/testbed", ("/opt/e/bin",))
    assert text.startswith("FROM sha256:" + "a" * 64 + "\n")
    assert "agent:x:1000:1000" in text and "chmod ug-s" in text
    assert "ln -s /workspace /testbed" in text
    assert f'{PATH_LABEL}="/opt/e/bin"' in text and text.endswith("USER agent\n")
    with pytest.raises(UserError):
        adapter_dockerfile("sha256:" + "a" * 64, "x/y:1", "/tmp/repo", ())


# --- with the real engine ----------------------------------------------------------------


def _build_base() -> None:
    """Debian bullseye's base (about 2 minutes the first time; its label keeps it), with
    the sandbox image on it (``make python-bases``)."""
    script = ROOT / "scripts" / "build-python-base.sh"
    done = subprocess.run(
        ["bash", str(script), "bullseye"], capture_output=True, text=True, timeout=1200
    )
    if done.returncode != 0:
        message = f"building {BASE} failed: {done.stderr[-2000:]}"
        if IN_CI or shutil.which("debootstrap"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def instance_image(docker_api: Any) -> str:
    """The instance-layout image (the engine's build cache keeps it between sessions)."""
    tag = "deltarun-test/instance-bullseye:tinycalc"
    # One debootstrap and one build, whichever worker comes first: two workers building
    # the tag at once without a cache could each tag a different image.
    with path_lock("bullseye-base"):
        try:
            docker_api.inspect_image(BASE)
        except docker.errors.ImageNotFound:
            _build_base()
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as archive:
            archive.add(CONTEXT, arcname=".")
        context.seek(0)
        for event in docker_api.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, decode=True,
            buildargs={"BASE": BASE},
        ):  # fmt: skip
            assert "error" not in event, event
        return str(docker_api.inspect_image(tag)["Id"])


@pytest.fixture(scope="module")
def served(
    docker_api: Any, instance_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The image in a loopback registry under SWE-bench's name, absent locally under it:
    (the template of its layout there, its manifest digest)."""
    if shutil.which("docker-registry") is None:
        message = "docker-registry is not installed; run `make registry`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    server = RegistryServer(tmp_path_factory.mktemp("registry"))
    server.start()
    repository = f"{server.address}/swebench/sweb.eval.x86_64.tinycalc_1776_tinycalc-1"
    try:
        docker_api.tag(instance_image, repository, "latest")
        digest = ""
        for event in docker_api.push(repository, "latest", stream=True, decode=True):
            assert "error" not in event, event
            digest = (event.get("aux") or {}).get("Digest", digest)
        docker_api.remove_image(f"{repository}:latest")
        assert digest.startswith("sha256:")
        yield f"{server.address}/swebench/sweb.eval.x86_64.{{swebench_id}}:latest", digest
    finally:
        for name in (f"{repository}:latest", f"{repository}@{digest}"):
            try:
                docker_api.remove_image(name)
            except docker.errors.APIError:
                pass
        server.stop()


def _spec(image: str) -> SandboxSpec:
    return SandboxSpec(
        image=image,
        limits=Limits(
            memory_bytes=512 << 20, nano_cpus=1_000_000_000, pids=128, workspace_bytes=64 << 20
        ),
        lifetime_s=120,
        labels={"run": f"instance-{uuid.uuid4().hex[:8]}", "job": "probe"},
    )


@pytest.mark.docker
def test_the_image_as_shipped_breaks_the_contract_and_the_adapted_one_keeps_it(
    docker_api: Any, instance_image: str
) -> None:
    factory = DockerSandboxFactory(docker_api)
    with pytest.raises(UserError) as refused:
        factory.preflight(_spec(instance_image))
    assert "an agent user with uid 1000" in str(refused.value)
    assert "setuid/setgid files" in str(refused.value)
    images = InstanceImages(docker_api, say=lambda line: None)
    path = images.environment(instance_image)
    assert path == ("/opt/miniconda3/envs/testbed/bin",)  # its bin/python, not ENV PATH
    adapted = images.adapt(
        "deltarun-test/instance-bullseye:tinycalc",
        instance_image,
        INSTANCE,
        "/testbed",
        path,
        lambda image: _check(factory, image),
    )
    factory.preflight(_spec(adapted.tag))
    script = (
        'python3 -c "import sys, tinycalc; print(sys.prefix, sys.version_info[:2], '
        'tinycalc.__file__)"; readlink /testbed; id -un; echo "$TINYCALC_HOME"; '
        "find / -xdev -perm /6000 -type f 2>/dev/null | wc -l"
    )
    with factory.open(_spec(adapted.tag)) as sandbox:
        sandbox.run(ExecRequest(argv=["mkdir", "-p", "/workspace/src/tinycalc"]))
        sandbox.run(
            ExecRequest(
                argv=["sh", "-c", "echo 'x = 1' > /workspace/src/tinycalc/__init__.py"],
            )
        )
        agent = sandbox.run(ExecRequest(argv=["sh", "-c", script], env={"PATH": "/usr/bin:/bin"}))
        root = sandbox.run(
            ExecRequest(argv=["sh", "-c", script], user=ROOT_USER, env={"PATH": "/usr/bin:/bin"})
        )
    for result, who in ((agent, "agent"), (root, "root")):
        lines = result.output.decode().split()
        assert result.exit_code == 0, result.output
        # The environment's python (3.9), and the project's editable install pointing at
        # /testbed, which leads to the workspace.
        assert lines[:3] == ["/opt/miniconda3/envs/testbed", "(3,", "9)"], lines
        assert lines[3] == "/testbed/src/tinycalc/__init__.py"
        # The image's own ENV reaches the agent's commands (and the tests'); deltarun's own,
        # as root, run with it blanked (runner.sandbox.image_env.root_env).
        home = ["/testbed"] if who == "agent" else []
        assert lines[4:] == ["/workspace", who, *home, "0"]


@pytest.mark.docker
def test_a_digest_the_registry_does_not_hold_is_refused(
    docker_api: Any, served: tuple[str, str]
) -> None:
    template, digest = served
    images = InstanceImages(docker_api, say=lambda line: None)
    name = reference_of(template, INSTANCE, "tinycalc/tinycalc", "0.1").removesuffix(":latest")
    assert images.present(f"{name}@{digest}").startswith("sha256:")
    wrong = "sha256:" + ("0" if digest[-1] != "0" else "1") * 64
    with pytest.raises((UserError, DigestMismatch)):
        images.present(f"{name}@{wrong}")


@pytest.mark.docker
@pytest.mark.parametrize("tree", ["commit", "image"])
def test_an_instance_image_imports_validates_and_grades(
    docker_api: Any, served: tuple[str, str], tmp_path: Path, tree: str
) -> None:
    """Pulled from the registry, the fixture taken out of the image (no clone; its git tree
    at base_commit, or the repository as the image has it), the gold patch valid, an empty
    prediction a miss and gold a success in a real run."""
    template, _digest = served
    try:  # absent here under its registry name, whichever test pulled it before
        docker_api.remove_image(reference_of(template, INSTANCE, "tinycalc/tinycalc", "0.1"))
    except docker.errors.ImageNotFound:
        pass
    base_commit = _head_of(docker_api, "deltarun-test/instance-bullseye:tinycalc")
    row = {
        "instance_id": INSTANCE,
        "repo": "tinycalc/tinycalc",
        "base_commit": base_commit,
        "version": "0.1",
        "problem_statement": "clamp() does not hold a value above the high bound.",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_clamp_high"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
    }
    (tmp_path / "instances.jsonl").write_text(json.dumps(row) + "\n")
    for name, patch in (("nothing", ""), ("gold", GOLD)):
        prediction = {"instance_id": INSTANCE, "model_name_or_path": name, "model_patch": patch}
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(prediction) + "\n")
    # SWE-bench's spec shape: the image has the project installed already (here in a venv,
    # where a user-scheme install could not even run), so its install step is not run.
    (tmp_path / "specs.json").write_text(
        json.dumps(
            {
                "tinycalc/tinycalc": {
                    "0.1": {
                        "install": "python -m pip install -e . --no-deps --no-build-isolation",
                        "test_cmd": "pytest -rA",
                    }
                }
            }
        )
    )
    out = tmp_path / "suite"
    imported = run_cli(
        "import", "swebench", str(tmp_path / "instances.jsonl"), "--out", str(out),
        "--instance-image", template, "--predictions", f"nothing={tmp_path / 'nothing.jsonl'}",
        "--predictions", f"gold={tmp_path / 'gold.jsonl'}", "--validate", "1", "--timeout", "120",
        "--specs", str(tmp_path / "specs.json"), "--instance-tree", tree,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert "pulling " in imported.stderr
    assert "the spec's install, pip_packages, python and env_vars are not applied" in (
        imported.stderr
    )
    assert leftover_sandboxes(docker_api, owner=imported.owner) == ([], [])
    task = json.loads((out / "suite" / "tasks.jsonl").read_text())
    assert task["image"].startswith("deltarun-instance/tinycalc-tinycalc-1:")
    assert "install" not in task
    assert (f"base:{base_commit}" in task["tags"]) == (tree == "commit"), task["tags"]
    validation = json.loads((out / "suite" / "validation.json").read_text())
    assert [t["verdict"] for t in validation["tasks"]] == ["valid"], validation
    ran = run_cli("run", str(out / "controls.yaml"), "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    trials = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").open()]
    outcomes = {t["arm"]: t["outcome"] for t in trials}
    assert outcomes == {"nothing": "miss", "gold": "success"}, trials
    miss = next(t for t in trials if t["arm"] == "nothing")
    assert "test_clamp_high" in miss["reason"]


def _head_of(api: Any, image: str) -> str:
    """The commit at /testbed in ``image``, read as the image ships it."""
    container = api.create_container(image, ["git", "-C", "/testbed", "rev-parse", "HEAD"])
    try:
        api.start(container)
        assert api.wait(container, timeout=60)["StatusCode"] == 0
        return str(api.logs(container, stderr=False).decode().strip())
    finally:
        api.remove_container(container, force=True)


@pytest.mark.docker
def test_an_environment_directory_that_leads_where_a_sandbox_writes_is_refused(
    docker_api: Any,
) -> None:
    """A label naming /opt/env, a link to /tmp: the label reads well, the preflight follows
    the link inside the image and refuses it (root runs the harness from that PATH)."""
    from tests.helpers import PY_IMAGE

    dockerfile = (
        f"FROM {PY_IMAGE}\nUSER root\nRUN ln -s /tmp /opt/env\n"
        f'LABEL {PATH_LABEL}="/opt/env" deltarun.test.instance="{uuid.uuid4().hex}"\nUSER agent\n'
    )
    image = ""
    for event in docker_api.build(
        fileobj=io.BytesIO(dockerfile.encode()), rm=True, forcerm=True, decode=True
    ):
        assert "error" not in event, event
        image = (event.get("aux") or {}).get("ID", image)
    try:
        with pytest.raises(UserError, match="a PATH directory /opt/env leading to /tmp"):
            DockerSandboxFactory(docker_api).preflight(_spec(image))
    finally:
        docker_api.remove_image(image, force=True)


@pytest.mark.docker
def test_a_repository_is_taken_out_of_one_image_for_all_its_instances(
    docker_api: Any, instance_image: str, tmp_path: Path
) -> None:
    """Two instances at one base commit: one image's .git serves both (a large repository
    is not copied out once per instance), and each gets its adapted image."""
    from runner.swebench.from_images import take_instances
    from runner.swebench.instances import Instance
    from runner.swebench.specs import Specs

    head = _head_of(docker_api, "deltarun-test/instance-bullseye:tinycalc")
    instances = [
        Instance(
            f"tinycalc__tinycalc-{n}", "tinycalc/tinycalc", head, "", "", "x", "", "0.1", (), ()
        )
        for n in (1, 2)
    ]
    said: list[str] = []
    found = take_instances(
        ("deltarun-test/instance-bullseye:tinycalc", "/testbed", "commit"),
        instances,
        Specs({}),
        tmp_path,
        said.append,
    )
    assert [line for line in said if ".git taken out" in line] == [
        f"import: tinycalc/tinycalc: /testbed/.git taken out of {instance_image[:19]}"
    ]
    assert sorted(found.images) == ["tinycalc__tinycalc-1", "tinycalc__tinycalc-2"]
    clone = found.clones["tinycalc/tinycalc"]
    shown = subprocess.run(
        ["git", "--git-dir", str(clone), "rev-parse", f"{head}^{{tree}}"],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0 and len(shown.stdout.strip()) == 40, shown.stderr


def _derived(api: Any, base: str, lines: str) -> str:
    dockerfile = f"FROM {base}\n{lines}\nLABEL deltarun.test.instance={uuid.uuid4().hex}\n"
    image = ""
    for event in api.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, decode=True):
        assert "error" not in event, event
        image = (event.get("aux") or {}).get("ID", image)
    return image


@pytest.mark.docker
def test_an_entrypoint_is_dropped_and_a_volume_or_trigger_refused(
    docker_api: Any, instance_image: str
) -> None:
    """The sandbox starts its own command, whatever ENTRYPOINT the image has; a VOLUME (no
    layer can undo it) would be a writable place outside the workspace: refused; so are
    ONBUILD triggers, which would run in deltarun's layer build."""
    factory = DockerSandboxFactory(docker_api)
    images = InstanceImages(docker_api, say=lambda line: None)
    wrapped = _derived(docker_api, instance_image, 'ENTRYPOINT ["/bin/false"]')
    volume = _derived(docker_api, instance_image, "VOLUME /data")
    triggered = _derived(docker_api, instance_image, "ONBUILD RUN touch /onbuild-ran")
    adapted = None
    try:
        adapted = images.adapt(
            "x/wrapped:1", wrapped, "wrapped-1", "/testbed", (), lambda i: _check(factory, i)
        )
        with pytest.raises(UserError, match="declares VOLUME /data"):
            images.environment(volume)
        with pytest.raises(UserError, match="declares VOLUME /data"):
            images.adapt("x/volume:1", volume, "volume-1", "/testbed", (), lambda i: None)
        # ONBUILD triggers would run in deltarun's own layer build over the image: refused.
        with pytest.raises(UserError, match=r"1 ONBUILD trigger.*touch /onbuild-ran"):
            images.adapt("x/onbuild:1", triggered, "onbuild-1", "/testbed", (), lambda i: None)
    finally:
        for image in (adapted.tag if adapted else None, wrapped, volume, triggered):
            try:
                if image:
                    docker_api.remove_image(image, force=True)
            except docker.errors.ImageNotFound:
                pass  # an untagged parent goes with its child


def _check(factory: DockerSandboxFactory, image: str) -> None:
    factory.preflight(_spec(image))


def test_the_import_needs_clones_or_images_and_images_are_the_environment(
    tmp_path: Path,
) -> None:
    row = {
        "instance_id": INSTANCE,
        "repo": "tinycalc/tinycalc",
        "base_commit": "0" * 40,
        "problem_statement": "x",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_clamp_high"],
        "PASS_TO_PASS": [],
    }
    (tmp_path / "i.jsonl").write_text(json.dumps(row) + "\n")
    neither = run_cli("import", "swebench", str(tmp_path / "i.jsonl"), "--out", str(tmp_path / "a"))
    assert neither.returncode == 1, neither.stderr
    assert "give --repos DIR (local clones) or --instance-image TEMPLATE" in neither.stderr
    both = run_cli(
        "import", "swebench", str(tmp_path / "i.jsonl"), "--out", str(tmp_path / "b"),
        "--instance-image", "swebench", "--environment", "env",
    )  # fmt: skip
    assert both.returncode == 1, both.stderr
    assert "the instance image is the environment" in both.stderr
    assert len(both.stderr.strip().splitlines()) == 1 and "Traceback" not in both.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_instances_negative_control_runs_on_its_image() -> None:
    from runner.swebench.from_images import set_images

    lines: list[dict[str, Any]] = [{"id": "a__b-1"}, {"id": "a__b-1.negative"}, {"id": "c"}]
    set_images(lines, {"a__b-1": "deltarun-instance/a-b-1:0123"})
    assert [line.get("image") for line in lines] == [
        "deltarun-instance/a-b-1:0123",
        "deltarun-instance/a-b-1:0123",
        None,
    ]


@pytest.mark.docker
def test_the_image_tree_is_the_repository_as_the_image_has_it(
    docker_api: Any, instance_image: str, tmp_path: Path
) -> None:
    """--instance-tree image: the fixture holds what the image's set-up wrote in place (an
    ignored version file here; compiled extensions, egg-info elsewhere), not .git; commit:
    the git tree at base_commit, without it."""
    from runner.swebench.from_images import take_instances
    from runner.swebench.instances import Instance
    from runner.swebench.specs import Specs

    head = _head_of(docker_api, "deltarun-test/instance-bullseye:tinycalc")
    listed, said = {}, []
    for tree in ("commit", "image"):
        instance = Instance(INSTANCE, "tinycalc/tinycalc", head, "", "", "x", "", "0.1", (), ())
        found = take_instances(
            ("deltarun-test/instance-bullseye:tinycalc", "/testbed", tree),
            [instance],
            Specs({}),
            tmp_path / tree,
            said.append,
        )
        (imported,) = found.instances
        shown = subprocess.run(
            ["git", "--git-dir", str(found.clones["tinycalc/tinycalc"]), "ls-tree", "-r",
             "--name-only", imported.base_commit],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        listed[tree] = set(shown.stdout.split())
        assert (imported.base_commit == head) == (tree == "commit")
    assert listed["image"] - listed["commit"] == {"src/tinycalc/_version.py"}
    # A git-tree fixture takes no link: the untracked one is left out, and said.
    assert f"warning: {INSTANCE}: 1 symbolic link(s) left out of the fixture" in "".join(said)
    assert not any(".git/" in name or "__pycache__" in name for name in listed["image"])
