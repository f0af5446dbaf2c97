# deltarun — the two commands of the README are `make demo` and `make test`;
# each does all of its own set-up on a fresh Debian machine.
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
J       ?= 2

.PHONY: help setup docker redis registry compose certs gvisor chromium images python-bases bullseye-base test-inputs worker-images examples demo pack30 envdemo swebench test test-setup adversarial adversarial-copy adversarial-gvisor lint bench gc clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

setup: $(STAMP) docker  ## create .venv with deltarun and its test tools; start Docker

redis:  ## install redis-server (Debian) for the distribution tests and benchmarks
	@bash scripts/ensure-redis.sh

registry:  ## install docker-registry (Debian) for the registry tests
	@bash scripts/ensure-registry.sh

compose:  ## install docker-compose and openssl (Debian) for the compose and TLS tests
	@bash scripts/ensure-compose.sh

certs:  ## make secrets/: a test CA, Redis TLS certificate, Redis user, job key (scripts/make-certs.sh)
	@bash scripts/ensure-compose.sh
	@bash scripts/make-certs.sh secrets $(NAMES)

gvisor: docker  ## install gVisor's runsc (Debian) and register it with the engine (no restart)
	@bash scripts/ensure-gvisor.sh

chromium:  ## install Debian's chromium, which renders report.html in the tests
	@bash scripts/ensure-chromium.sh

docker:  ## install (Debian docker.io) and start the Docker engine when it is missing
	@bash scripts/ensure-docker.sh

images: docker  ## build the sandbox images (idempotent, fast when present)
	@bash scripts/build-images.sh

python-bases: bullseye-base  ## sandbox images on Debian bullseye (Python 3.9) and trixie (3.13), for specs that pin those
	@bash scripts/build-python-base.sh trixie

bullseye-base: docker  ## the Debian bullseye (Python 3.9) sandbox base alone, which the tests build on
	@bash scripts/build-python-base.sh bullseye

test-inputs: $(STAMP) images  ## fetch the sdists and agent CLIs the tests use, and layer the CLIs (tests/prefetch.py)
	$(PY) -m tests.prefetch

worker-images: $(STAMP) images  ## build the worker, Redis and registry images used by compose.yaml
	@bash scripts/build-worker-images.sh

examples: $(STAMP)  ## build examples/quickstart/suite and patches/ from src/, and its copy in examples/openai (git-ignored)
	$(PY) examples/quickstart/build_suite.py
	$(PY) examples/quickstart/build_suite.py --out examples/openai

demo: setup images examples  ## run the quickstart suite on the local pool and print the headline
	$(VENV)/bin/deltarun run examples/quickstart/controls.yaml --allow-missing \
		--out runs/quickstart-$$(date -u +%Y%m%dT%H%M%SZ) -j $(J)

pack30: setup images  ## build examples/pack30 (20 ordinary + 10 negative tasks), run it, print the headline
	$(PY) examples/quickstart/build_suite.py --src examples/pack30/src --out examples/pack30
	$(VENV)/bin/deltarun run examples/pack30/controls.yaml \
		--out runs/pack30-$$(date -u +%Y%m%dT%H%M%SZ) -j $(J)

envdemo: setup images  ## build examples/environments (its image installs a PyPI wheel offline), run it
	$(PY) examples/environments/build_suite.py
	$(VENV)/bin/deltarun build examples/environments/controls.yaml --network none
	$(VENV)/bin/deltarun run examples/environments/controls.yaml \
		--out runs/envdemo-$$(date -u +%Y%m%dT%H%M%SZ) -j $(J)

swebench: setup images  ## SWE-bench-format example: instances + 2 predictions files -> suite -> paired report
	rm -rf examples/swebench/suite
	$(PY) examples/swebench/build_dataset.py
	$(VENV)/bin/deltarun import swebench examples/swebench/data/instances.jsonl \
		--repos examples/swebench/data/repos --out examples/swebench/suite --negatives 1 \
		--predictions model-a=examples/swebench/data/preds-model-a.jsonl \
		--predictions model-b=examples/swebench/data/preds-model-b.jsonl --timeout 300
	$(VENV)/bin/deltarun run examples/swebench/suite/controls.yaml \
		--out runs/swebench-$$(date -u +%Y%m%dT%H%M%SZ) -j $(J)

# Test workers (pytest-xdist): the Docker tests mostly wait on the engine, so more workers than
# cores; tests that watch or remove engine-wide state run alone (tests/conftest.py engine_lock).
# --maxschedchunk=1: tests are handed out one at a time in the collection order (the slowest
# first, tests/conftest.py), not in chunks of a quarter of the suite per worker.
# PYTHONDONTWRITEBYTECODE is cleared: the suite starts `deltarun` as a subprocess hundreds of
# times, and without cached bytecode each one compiles the package again (about a
# fifth of a command's CPU time).
TEST_WORKERS ?= 3

TEST_SETUP := setup redis registry compose gvisor chromium images bullseye-base worker-images test-inputs

test: test-setup  ## run the whole test suite (real Docker; CI=true forbids skips)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 --durations=25 tests

test-setup:  ## everything the tests need, set up side by side (apt-get one at a time: scripts/apt-get.sh)
	@$(MAKE) --no-print-directory -j4 --output-sync=line $(TEST_SETUP)

adversarial: setup images  ## the adversarial suite alone, with its table (attack, tried, happened, held)
	$(PY) -m pytest -q tests/adversarial

adversarial-copy: setup images  ## the adversarial suite with copy-free workspaces off (the copy path)
	DELTARUN_WORKSPACES=copy $(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 tests/adversarial

adversarial-gvisor: setup images gvisor  ## the adversarial suite with every sandbox under gVisor (runsc)
	DELTARUN_TEST_OCI_RUNTIME=runsc $(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 tests/adversarial

lint: $(STAMP)  ## ruff and mypy
	$(VENV)/bin/ruff check --no-cache runner tests bench scripts  # no cache: first-party is judged from the tree as it is now
	$(VENV)/bin/ruff format --no-cache --check runner tests bench
	$(VENV)/bin/mypy

bench: setup redis images  ## benchmarks, each against a baseline measured in the same run
	$(PY) bench/overhead.py
	$(PY) bench/dispatch.py
	$(PY) bench/scoring.py
	$(PY) bench/tools.py
	$(PY) bench/fixtures.py
	$(PY) bench/view_open.py
	$(PY) bench/key_scrub.py
	$(PY) bench/relay_reads.py
	$(PY) bench/preflight.py
	$(PY) bench/build.py
	$(PY) bench/fleet.py
	$(PY) bench/pacing.py

gc: setup  ## remove deltarun sandboxes left past their deadline
	$(VENV)/bin/deltarun gc

clean:  ## remove the venv and caches (not runs/)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
