"""deploy/kubernetes/ checked offline (no cluster ran it): every object against the
Kubernetes 1.30 OpenAPI schemas (kubernetes-validate, strict: unknown fields fail), the
KEDA objects against KEDA 2.16's CRD schemas vendored in deploy/kubernetes/schemas/, the
invariants that tie the objects to each other and to the code (drain before kill, the
queue names, one trial per pod, Secrets, Services, Prometheus), and the scaling rule
simulated over queue-depth series (deploy/kubernetes/scaling.py)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import typer
import yaml

from runner.cli import app
from runner.distributed import keys
from runner.distributed.celery_app import make_app
from runner.distributed.worker import DRAIN_TIMEOUT_S
from runner.telemetry import OUTCOME_ERROR, PREFIX
from tests.conftest import IN_CI
from tests.distributed_support import ROOT

KUBE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"  # native sidecars (initContainers restartPolicy) need 1.28+
TEMPLATE = "secrets.template.yaml"
NAMESPACE = "deltarun"


def _kubernetes_validate() -> ModuleType:
    """The schema package; a missing one fails in CI (CI=true) and skips elsewhere."""
    if not IN_CI:
        pytest.importorskip("kubernetes_validate")
    return importlib.import_module("kubernetes_validate")


def _scaling() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deltarun_k8s_scaling", KUBE / "scaling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


scaling = _scaling()


def _documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path.name, doc


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, doc in _documents() if doc["kind"] != "Kustomization"]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for _, d in _objects() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def _id(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}:{item[1]['kind']}/{item[1]['metadata']['name']}"


OBJECTS = _objects()
CORE = [o for o in OBJECTS if not o[1]["apiVersion"].startswith("keda.sh/")]
KEDA = [o for o in OBJECTS if o[1]["apiVersion"].startswith("keda.sh/")]


def _keda_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        (KUBE / "schemas" / f"keda-v1alpha1-{kind.lower()}.json").read_text()
    )
    return schema


def _keda_errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(_keda_schema(doc["kind"]))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def _worker() -> dict[str, Any]:
    return _one("Deployment", "deltarun-worker")


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        if container["name"] == name:
            found: dict[str, Any] = container
            return found
    raise AssertionError(f"no container {name}")


def _worker_args() -> list[str]:
    args: list[str] = _container(_worker()["spec"]["template"]["spec"], "worker")["args"]
    return args


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _trigger(kind: str) -> dict[str, Any]:
    triggers = _one("ScaledObject", "deltarun-worker")["spec"]["triggers"]
    found: list[dict[str, Any]] = [t for t in triggers if t["type"] == kind]
    assert len(found) == 1
    return found[0]


# -- schemas ----------------------------------------------------------------------


@pytest.mark.parametrize("item", CORE, ids=_id)
def test_each_object_is_valid_kubernetes(item: tuple[str, dict[str, Any]]) -> None:
    validate = _kubernetes_validate()
    _, doc = item
    validate.validate(doc, KUBERNETES_VERSION, strict=True)
    if doc["kind"] != "Namespace":
        assert doc["metadata"]["namespace"] == NAMESPACE


def test_the_kubernetes_schemas_reject_what_they_should() -> None:
    """Strict validation catches a misspelled field, and the version matters: 1.27's
    schema has no native sidecars."""
    validate = _kubernetes_validate()
    worker = json.loads(json.dumps(_worker()))
    validate.validate(worker, KUBERNETES_VERSION, strict=True)
    with pytest.raises(validate.ValidationError, match="restartPolicy"):
        validate.validate(worker, "1.27", strict=True)
    worker["spec"]["template"]["spec"]["terminationGracePeriod"] = 960
    with pytest.raises(validate.ValidationError, match="terminationGracePeriod"):
        validate.validate(worker, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("item", KEDA, ids=_id)
def test_each_keda_object_matches_the_crd_schema(item: tuple[str, dict[str, Any]]) -> None:
    _, doc = item
    assert doc["apiVersion"] == "keda.sh/v1alpha1"
    assert _keda_errors(doc) == []


def test_the_keda_schema_rejects_what_it_should() -> None:
    assert {d["kind"] for _, d in KEDA} == {"ScaledObject", "TriggerAuthentication"}
    scaled = json.loads(json.dumps(_one("ScaledObject", "deltarun-worker")))
    assert "KEDA 2.16" in _keda_schema("ScaledObject")["$comment"]
    scaled["spec"]["advanced"]["scalingModifier"] = scaled["spec"]["advanced"].pop(
        "scalingModifiers"
    )
    assert any("scalingModifier" in e for e in _keda_errors(scaled))
    del scaled["spec"]["triggers"]
    assert any("triggers" in e for e in _keda_errors(scaled))
    scaled = json.loads(json.dumps(_one("ScaledObject", "deltarun-worker")))
    scaled["spec"]["triggers"][0]["metadata"]["listLength"] = 1  # must be a string
    assert _keda_errors(scaled)


def test_kustomization_applies_everything_but_the_secret_templates() -> None:
    (kustomization,) = [d for _, d in _documents() if d["kind"] == "Kustomization"]
    files = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files - {TEMPLATE}
    assert {d["kind"] for n, d in OBJECTS if n == TEMPLATE} == {"Secret"}


# -- the workers, against the code ---------------------------------------------------


def test_workers_drain_before_the_pod_is_killed() -> None:
    pod = _worker()["spec"]["template"]["spec"]
    args = _worker_args()
    drain = float(_option(args, "--drain-timeout"))
    assert drain == DRAIN_TIMEOUT_S
    assert pod["terminationGracePeriodSeconds"] > drain
    assert pod["terminationGracePeriodSeconds"] > DRAIN_TIMEOUT_S
    # The engine is a native sidecar: stopped only after the worker has drained.
    engine = _container(pod, "dockerd")
    assert engine in pod["initContainers"] and engine["restartPolicy"] == "Always"
    assert engine["securityContext"]["privileged"] is True
    assert "startupProbe" in engine


def test_worker_command_is_one_the_cli_accepts_with_secrets_from_files() -> None:
    args = _worker_args()
    assert args[0] == "worker"
    command = typer.main.get_command(app)
    command.commands["worker"].make_context("worker", list(args[1:]))  # type: ignore[attr-defined]
    assert "--broker" not in args
    worker = _container(_worker()["spec"]["template"]["spec"], "worker")
    assert worker["image"] == "deltarun/worker:latest"
    mounted = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    secret_keys = set(_one("Secret", "deltarun-worker")["stringData"])
    for option in (
        "--broker-file",
        "--broker-ca",
        "--broker-cert",
        "--broker-key",
        "--job-key-file",
    ):
        path = Path(_option(args, option))
        assert str(path.parent) == mounted["secrets"] and path.name in secret_keys, option


def test_one_trial_per_pod_with_prefetch_one() -> None:
    assert make_app("rediss://deltarun@redis:6379/0").conf.worker_prefetch_multiplier == 1
    assert _option(_worker_args(), "-c") == "1"
    modifiers = _one("ScaledObject", "deltarun-worker")["spec"]["advanced"]["scalingModifiers"]
    assert modifiers["target"] == "1" and modifiers["metricType"] == "AverageValue"


def test_the_trigger_reads_the_queue_the_code_uses() -> None:
    image = _option(_worker_args(), "-Q")
    assert "," not in image  # one image per Deployment and ScaledObject
    queued = _trigger("redis")
    # The sidecar engine has only runc, so the worker consumes exactly this queue.
    assert keys.queues_for_image(image, (keys.DEFAULT_RUNTIME,)) == [queued["metadata"]["listName"]]
    assert queued["metadata"]["listName"] == keys.queue_for_image(image)
    assert queued["metadata"]["listLength"] == "1"
    host = queued["metadata"]["address"].rsplit(":", 1)[0]
    assert host == f"{_one('Service', 'redis')['metadata']['name']}.{NAMESPACE}.svc.cluster.local"


def test_in_flight_is_counted_from_the_workers_metrics() -> None:
    trigger = _trigger("prometheus")
    query = trigger["metadata"]["query"]
    telemetry = (ROOT / "runner" / "telemetry.py").read_text()
    names = set(re.findall(r"\b(deltarun_worker_\w+)\{", query))
    assert names == {
        PREFIX + "trials_started_total",
        PREFIX + "trials_finished_total",
        PREFIX + "infrastructure_errors_total",
    }
    for name in names:
        assert re.search(rf'counter\(\s*"{name.removeprefix(PREFIX)}"', telemetry), name
    # Records with outcome error are finished trials too: not subtracted twice.
    assert f'kind!="{OUTCOME_ERROR}"' in query
    config = yaml.safe_load(_one("ConfigMap", "prometheus")["data"]["prometheus.yml"])
    (job,) = config["scrape_configs"]
    assert set(re.findall(r'job="([^"]+)"', query)) == {job["job_name"]}
    (sd,) = job["dns_sd_configs"]
    metrics = _one("Service", "deltarun-worker-metrics")
    assert metrics["spec"]["clusterIP"] == "None"
    assert sd["names"] == [f"deltarun-worker-metrics.{NAMESPACE}.svc.cluster.local"]
    assert sd["port"] == int(_option(_worker_args(), "--metrics-port"))
    assert _option(_worker_args(), "--metrics-addr") == "0.0.0.0"
    server = trigger["metadata"]["serverAddress"]
    assert server == f"http://prometheus.{NAMESPACE}.svc.cluster.local:9090"
    prometheus = _container(
        _one("Deployment", "prometheus")["spec"]["template"]["spec"], "prometheus"
    )
    assert "--config.file=/etc/deltarun/prometheus.yml" in prometheus["args"]


def test_the_formula_sums_the_two_triggers() -> None:
    spec = _one("ScaledObject", "deltarun-worker")["spec"]
    names = [t["name"] for t in spec["triggers"]]
    assert sorted(
        scaling.parse_sum(spec["advanced"]["scalingModifiers"]["formula"], names)
    ) == sorted(names)
    assert spec["scaleTargetRef"]["name"] == _worker()["metadata"]["name"]
    assert "replicas" not in _worker()["spec"]  # KEDA owns the count


# -- the same parts as compose.yaml ------------------------------------------------------


def test_redis_and_images_match_compose() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    redis = _container(_one("StatefulSet", "redis")["spec"]["template"]["spec"], "redis")
    assert redis["command"] == compose["redis"]["command"]
    assert redis["image"] == compose["redis"]["image"]
    registry = _one("Deployment", "registry")["spec"]["template"]["spec"]
    assert _container(registry, "registry")["image"] == compose["registry"]["image"]
    assert (
        _container(_worker()["spec"]["template"]["spec"], "worker")["image"]
        == compose["worker"]["image"]
    )
    assert _one("Service", "redis")["spec"]["ports"][0]["port"] == 6379
    # The broker URL from `make certs` names the host `redis`: the Service's name.
    assert _one("Service", "redis")["metadata"]["name"] == "redis"


def test_referenced_secrets_exist_with_the_keys_used(tmp_path: Path) -> None:
    secrets = {d["metadata"]["name"]: d for _, d in OBJECTS if d["kind"] == "Secret"}
    used: set[str] = set()
    for _, doc in OBJECTS:
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        for volume in (pod or {}).get("volumes", []):
            if "secret" in volume:
                used.add(volume["secret"]["secretName"])
    for ref in _one("TriggerAuthentication", "deltarun-redis")["spec"]["secretTargetRef"]:
        assert ref["key"] in secrets[ref["name"]]["stringData"], ref
        used.add(ref["name"])
    assert used == set(secrets)
    redis = _container(_one("StatefulSet", "redis")["spec"]["template"]["spec"], "redis")
    tls_files = {Path(a).name for a in redis["command"] if a.startswith("/tls/")}
    assert tls_files <= set(secrets["deltarun-redis-tls"]["stringData"])
    # The templates hold exactly what `make certs` writes (and no key material).
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert {p.name for p in (tmp_path / "s" / "redis").iterdir()} == set(
        secrets["deltarun-redis-tls"]["stringData"]
    )
    worker_files = {p.name for p in (tmp_path / "s" / "worker").iterdir()} - {"worker.env"}
    assert worker_files == set(secrets["deltarun-worker"]["stringData"])
    for secret in secrets.values():
        for value in secret["stringData"].values():
            assert "PRIVATE KEY" not in value and "CERTIFICATE" not in value


def test_services_select_existing_pods_and_ports() -> None:
    pods = []
    for _, doc in OBJECTS:
        template = doc.get("spec", {}).get("template")
        if template:
            assert (
                doc["spec"]["selector"]["matchLabels"].items()
                <= template["metadata"]["labels"].items()
            )
            pods.append(template)
    services = [d for _, d in OBJECTS if d["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} >= {"redis", "registry", "prometheus"}
    for service in services:
        selector = service["spec"]["selector"].items()
        chosen = [p for p in pods if selector <= p["metadata"]["labels"].items()]
        assert len(chosen) == 1, service["metadata"]["name"]
        ports = {
            port["name"]
            for c in [
                *chosen[0]["spec"]["containers"],
                *chosen[0]["spec"].get("initContainers", []),
            ]
            for port in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, service["metadata"]["name"]


def test_the_engine_and_the_worker_share_the_socket_and_the_registry() -> None:
    pod = _worker()["spec"]["template"]["spec"]
    engine, worker = _container(pod, "dockerd"), _container(pod, "worker")
    host = {e["name"]: e["value"] for e in worker["env"]}
    socket = host["DOCKER_HOST"].removeprefix("unix://")
    assert f"--host=unix://{socket}" in engine["args"]
    run = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
    assert {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}[
        str(Path(socket).parent)
    ] == run[str(Path(socket).parent)]
    registry = f"registry.{NAMESPACE}.svc.cluster.local:5000"
    assert f"--insecure-registry={registry}" in engine["args"]
    assert host["DELTARUN_BLOB_REGISTRY"] == f"http://{registry}"


# -- the scaling rule, simulated -------------------------------------------------------


def _rule() -> Any:
    return scaling.rule_from_scaled_object(_one("ScaledObject", "deltarun-worker"))


def _series(queued: list[int], in_flight: list[int]) -> list[dict[str, float]]:
    return [{"queued": q, "in_flight": f} for q, f in zip(queued, in_flight, strict=True)]


def test_the_rule_read_from_the_scaled_object() -> None:
    rule = _rule()
    assert (rule.min_replicas, rule.max_replicas, rule.polling_s, rule.cooldown_s) == (
        0,
        8,
        15,
        300,
    )
    assert rule.formula == ("queued", "in_flight") and rule.formula_target == 1.0
    assert rule.down.window_s == 300 and rule.up.window_s == 0


def test_a_rising_queue_raises_replicas_to_the_maximum() -> None:
    rule = _rule()
    queued = [0, 1, 2, 4, 8, 16, 32, 64, 64, 64]
    replicas = scaling.simulate(rule, _series(queued, [0] * len(queued)))
    assert replicas[0] == 0 and replicas[1] == 1  # KEDA activates from zero
    assert replicas == sorted(replicas)  # never down while the queue rises
    assert replicas[-1] == rule.max_replicas
    assert max(replicas) == rule.max_replicas
    # Scale-up is capped at 4 pods per 15 s step.
    assert all(b - a <= 4 for a, b in itertools.pairwise(replicas))


def test_trials_in_flight_keep_their_workers() -> None:
    rule = _rule()
    # A burst, then the queue empties while 5, then 3 trials are still running.
    queued = [6, 6, 6] + [0] * 50
    in_flight = [0, 0, 2] + [5] * 20 + [3] * 30
    replicas = scaling.simulate(rule, _series(queued, in_flight))
    for step, (have, running) in enumerate(zip(replicas, in_flight, strict=True)):
        if step > 1:
            assert have >= running, (step, replicas)
    assert replicas[22] == 8  # the 300 s window keeps the burst's replicas (6 + 2) a while
    assert replicas[-1] == 3  # then down to the trials in flight, never below
    # KEDA's own rule (the max over triggers) would give the queue no workers while
    # others run: 6 queued and 5 in flight ask for 6, not 11.
    series = _series([6, 6, 6, 6, 6, 6], [5, 5, 5, 5, 5, 5])
    summed = scaling.simulate(rule, series)
    maxed = scaling.simulate(replace(rule, formula=None), series)
    assert summed[-1] == 8 and maxed[-1] == 6


def test_idle_scales_to_the_minimum_only_after_the_cooldown() -> None:
    rule = _rule()
    steps_busy, steps_idle = 4, 40
    queued = [3] * steps_busy + [0] * steps_idle
    replicas = scaling.simulate(rule, _series(queued, [0] * len(queued)))
    cooldown_steps = rule.cooldown_s // rule.polling_s
    last_active = steps_busy - 1
    assert all(r >= 1 for r in replicas[: last_active + cooldown_steps])
    assert replicas[last_active + cooldown_steps] == rule.min_replicas == 0
    assert replicas[-1] == 0
    # A blip within the cooldown brings no new pod: the stabilised replicas still serve.
    again = scaling.simulate(rule, _series(queued[:10] + [1] + [0] * 5, [0] * 16))
    assert again[10] >= 1 and min(again[:16]) >= 1


def test_the_docs_say_what_was_and_was_not_run() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    assert "No cluster ran these files here" in text
    assert f"Kubernetes {KUBERNETES_VERSION}" in text and "KEDA 2.16" in text
    for name in [p.name for p in KUBE.glob("*.yaml")]:
        assert f"`{name}`" in text, name
