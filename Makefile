# All set-up happens here: a fresh Debian machine needs only python3, make and apt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The development environment installs from the lock (requirements/dev.lock: every package,
# transitive ones included, with hashes), so `make test` installs the same versions on any
# day; `make lock` refreshes it (docs/testing.md, docs/dependencies.md).
DEV_LOCK := requirements/dev.lock
BUILD_LOCK := requirements/build.lock
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(DEV_LOCK) $(BUILD_LOCK) | cksum | cut -d' ' -f1)

# $(call locked-venv,DIR,PYTHON): a virtual environment at DIR made by PYTHON and filled
# from the lock: first the installer and build backend, then every locked package without
# dependency resolution (--no-deps: the lock already holds them all) and without build
# isolation (an sdist such as pyspark's builds with the locked setuptools, not the day's),
# then txbroker itself in editable mode, and `pip check` to prove the set consistent.
define locked-venv
	@$(2) -m venv $(1) 2>/dev/null || { \
	  echo "$(2) -m venv failed: installing python3-venv"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv && \
	  rm -rf $(1) && $(2) -m venv $(1); }
	$(1)/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r $(BUILD_LOCK)
	$(1)/bin/python -m pip install -q --require-hashes --no-deps --no-build-isolation -r $(DEV_LOCK)
	$(1)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	$(1)/bin/python -m pip check
endef

$(STAMP): pyproject.toml $(DEV_LOCK) $(BUILD_LOCK)
	$(call locked-venv,$(VENV),$(PYTHON))
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

# Refresh the lock: the lower end of each of pyproject.toml's ranges (uv's lowest-direct
# resolution: the lock tests the floors; `make test-latest` the newest) and the newest
# release of every transitive package that fits them, for every supported Python.
UV_VERSION := 0.13.10
LOCK_OPTS := --universal --python-version 3.11 --generate-hashes -q
lock:
	@[ -x .venv-uv/bin/uv ] || { $(PYTHON) -m venv .venv-uv && \
	  .venv-uv/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION); }
	.venv-uv/bin/uv pip compile $(LOCK_OPTS) requirements/build.in -o $(BUILD_LOCK)
	.venv-uv/bin/uv pip compile $(LOCK_OPTS) --resolution lowest-direct --all-extras \
	  pyproject.toml requirements/build.in -o $(DEV_LOCK)

# kcat is used by the tests (a librdkafka CLI client); chromium and chromium-driver by the
# console's browser test (tests/integration/console/, driven by Selenium: docs/dependencies.md).
system-deps:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq kcat; }
	@{ command -v chromium >/dev/null 2>&1 && [ -x /usr/bin/chromedriver ]; } || { \
	  echo "installing chromium and chromium-driver"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium chromium-driver; }

# Apache Kafka from Maven Central, the reference broker of the differential tests
# (tests/differential/, tests/kafka_reference.py). Only the tests use it: txbroker itself
# has no JVM dependency. Versions and why: docs/dependencies.md.
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' tests/kafka/pom.xml)
KAFKA_JARS := .jvm/kafka-$(KAFKA_VERSION)
KAFKA_STAMP := $(KAFKA_JARS)/.complete

# Flattened jars (one folder for `java -cp 'dir/*'`); the stamp is written last, so an
# interrupted fetch is redone and a completed one is skipped.
$(KAFKA_STAMP): tests/kafka/pom.xml
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "installing maven"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq maven; }
	@echo "fetching Apache Kafka $(KAFKA_VERSION) jars into $(KAFKA_JARS)"
	@rm -rf $(KAFKA_JARS) $(KAFKA_JARS).tmp
	@mkdir -p .jvm
	@mvn -q -B -f tests/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(KAFKA_JARS).tmp >.jvm/maven.log 2>&1 || { \
	  cat .jvm/maven.log; echo "make kafka-jars: Maven failed (log above, .jvm/maven.log)" >&2; \
	  exit 1; }
	@mv $(KAFKA_JARS).tmp $(KAFKA_JARS)
	@touch $@

kafka-jars: $(KAFKA_STAMP)

# MirrorMaker 2's jars, a classpath of their own at their own version (tests/kafka/mirror/pom.xml):
# only `make test-cluster` uses them (tests/cluster/mirror.py). Same stamp pattern.
MIRROR_POM := tests/kafka/mirror/pom.xml
MIRROR_VERSION := $(shell sed -n 's:.*<mirror.version>\(.*\)</mirror.version>.*:\1:p' $(MIRROR_POM))
MIRROR_JARS := .jvm/mirror-$(MIRROR_VERSION)
MIRROR_STAMP := $(MIRROR_JARS)/.complete

$(MIRROR_STAMP): $(MIRROR_POM)
	@echo "fetching MirrorMaker 2 $(MIRROR_VERSION) jars into $(MIRROR_JARS)"
	@rm -rf $(MIRROR_JARS) $(MIRROR_JARS).tmp
	@mkdir -p .jvm
	@mvn -q -B -f $(MIRROR_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(MIRROR_JARS).tmp >.jvm/maven-mirror.log 2>&1 || { \
	  cat .jvm/maven-mirror.log; echo "make mirror-jars: Maven failed (log above)" >&2; exit 1; }
	@mv $(MIRROR_JARS).tmp $(MIRROR_JARS)
	@touch $@

mirror-jars: $(MIRROR_STAMP)

# Spark's Kafka connector (spark-sql-kafka-0-10) and the jars it needs that pyspark does
# not ship, for `format("kafka")` (spark_jobs/session.py passes them as spark.jars).
# Its version is spark.version in spark_jobs/connector/pom.xml; why not pyspark's own:
# docs/dependencies.md. Same stamp pattern as kafka-jars.
SPARK_KAFKA_POM := spark_jobs/connector/pom.xml
SPARK_KAFKA_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' $(SPARK_KAFKA_POM))
SPARK_KAFKA_JARS := .jvm/spark-kafka-$(SPARK_KAFKA_VERSION)
SPARK_KAFKA_STAMP := $(SPARK_KAFKA_JARS)/.complete

$(SPARK_KAFKA_STAMP): $(SPARK_KAFKA_POM)
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "installing maven"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq maven; }
	@echo "fetching Spark's Kafka connector $(SPARK_KAFKA_VERSION) into $(SPARK_KAFKA_JARS)"
	@rm -rf $(SPARK_KAFKA_JARS) $(SPARK_KAFKA_JARS).tmp
	@mkdir -p .jvm
	@mvn -q -B -f $(SPARK_KAFKA_POM) dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA_JARS).tmp >.jvm/maven-spark-kafka.log 2>&1 || { \
	  cat .jvm/maven-spark-kafka.log; \
	  echo "make spark-kafka-jars: Maven failed (log above, .jvm/maven-spark-kafka.log)" >&2; \
	  exit 1; }
	@mv $(SPARK_KAFKA_JARS).tmp $(SPARK_KAFKA_JARS)
	@touch $@

spark-kafka-jars: $(SPARK_KAFKA_STAMP)

# KafkaJS (npm, pinned with its lockfile in tests/kafkajs) for the KafkaJS test
# (tests/differential/test_kafkajs.py). `npm ci` installs exactly the lockfile.
KAFKAJS_STAMP := tests/kafkajs/node_modules/.installed

$(KAFKAJS_STAMP): tests/kafkajs/package.json tests/kafkajs/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing nodejs and npm"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs npm; }
	cd tests/kafkajs && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

kafkajs: $(KAFKAJS_STAMP)

# franz-go (Go modules, pinned by tests/go/go.mod and go.sum) for the franz-go share
# consumer test (tests/differential/test_share_clients.py, which builds it; Go >= 1.26),
# and the franz-go chaos share worker into build/go/chaosshare (`txbroker chaos --share`).
franz-go:
	cd tests/go && go mod download && go build -mod=readonly -o /dev/null ./sharegroup
	cd tests/go && go build -mod=readonly -o ../../build/go/chaosshare ./chaosshare

install: $(STAMP) system-deps kafka-jars spark-kafka-jars kafkajs

lint: install
	$(PY) -m ruff check .

# The Kafka leg of the differential tests is limited to those marked kafka_ci here
# (Kafka starts once for them); `make test-kafka` runs every differential test on both,
# and the Spark tests against Apache Kafka (the ingestion job's third place).
test: install lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m "(not kafka or kafka_ci) and not cluster and not chaos and not long"

# The subset `make test-latest` and `make test-python` run: every dependency is exercised
# (about 5 minutes on two cores): kio, crc32c, msgpack, cramjam and hypothesis by the unit
# tests and models (run at `make test`'s example counts); aiohttp, prometheus-client and
# selenium by the console and metrics tests; trustme and cryptography by the TLS fixture and
# the secured pipeline; kafka-python, aiokafka, confluent-kafka, kcat, lz4, zstandard and
# python-snappy by the client and compression tests; psutil, uvloop and the fixture by the
# fixture's tests; pyspark, pyarrow and numpy by the Spark source's tests; ruff by lint.
SUBSET_TESTS := tests/unit tests/integration/test_clients.py tests/integration/test_compression.py \
  tests/integration/test_metrics.py tests/integration/testing tests/integration/security \
  tests/integration/console/test_console_browser.py tests/integration/spark/test_source.py
SUBSET_MARKS := (not kafka or kafka_ci) and not cluster and not chaos and not long

# The newest release of every dependency, no lock: a fresh environment each time, the
# versions it got in .venv-latest/versions.txt, and the subset above. A dependency's newest
# release outside pyproject.toml's range is not installed (docs/dependencies.md).
LATEST_VENV := .venv-latest
test-latest: system-deps kafka-jars
	@rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
	$(LATEST_VENV)/bin/python -m pip install -q --no-cache-dir --upgrade --upgrade-strategy eager \
	  -e '.[test,bench,spark,tls]'
	$(LATEST_VENV)/bin/python -m pip check
	@$(LATEST_VENV)/bin/python -m pip freeze --all --exclude-editable > $(LATEST_VENV)/versions.txt
	@$(LATEST_VENV)/bin/python -m tests.lock_report $(DEV_LOCK) $(LATEST_VENV)/versions.txt
	$(LATEST_VENV)/bin/python -m ruff check .
	$(LATEST_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "$(SUBSET_MARKS)" $(SUBSET_TESTS)

# The same subset on another Python, from the lock: `make test-python PYTHON=3.13` (a
# version, found as python3.13 on PATH or under pyenv, or an interpreter's path);
# TESTS=... runs other tests, e.g. TESTS=tests for the whole suite.
TESTS ?= $(SUBSET_TESTS)
# (pyenv's own folder first: its shims on the PATH answer for versions not selected.)
PYTHON_BIN = $(firstword $(if $(findstring /,$(PYTHON)),$(PYTHON)) \
  $(wildcard $(shell pyenv root 2>/dev/null)/versions/$(PYTHON)*/bin/python$(PYTHON)) \
  $(shell command -v python$(PYTHON) $(PYTHON) 2>/dev/null))
PY_VENV = .venv-$(notdir $(PYTHON_BIN))
test-python: system-deps kafka-jars
	@[ -n "$(PYTHON_BIN)" ] || { echo "make test-python: no interpreter for PYTHON=$(PYTHON)" >&2; exit 1; }
	@echo "test-python: $(PYTHON_BIN) ($$($(PYTHON_BIN) --version))"
	@rm -rf $(PY_VENV)
	$(call locked-venv,$(PY_VENV),$(PYTHON_BIN))
	$(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "$(SUBSET_MARKS)" $(TESTS)

# Slow tests on two cores (marker long) whose ground a faster test in `make test`
# covers in part: the Spark driver's SIGTERM stop, the SIGKILL of a driver reading with
# Spark's Kafka connector (the txbroker source's kill stays in), a read-only data
# directory (a failing one stays in).
test-long: install
	$(PY) -m pytest -q -p no:cacheprovider -m long

# txbroker chaos runs of the sample pipeline, of the recipes per client, with a
# generator of one's own and of the share-group workers (tests/integration/chaos/): ~8 min.
test-chaos: install
	$(PY) -m pytest -q -p no:cacheprovider -m chaos tests/integration/chaos

# The Java recipe of docs/testing-your-pipeline.md (tests/jvm/chaos/ChaosPipeline.java),
# compiled against the pinned Kafka client jars: java -cp '.jvm/chaos-recipes:$(KAFKA_JARS)/*'
chaos-recipes: kafka-jars
	@mkdir -p .jvm/chaos-recipes
	javac -nowarn -d .jvm/chaos-recipes -cp '$(KAFKA_JARS)/*' tests/jvm/chaos/*.java

test-kafka: install
	$(PY) -m pytest -q -p no:cacheprovider tests/differential
	$(PY) -m pytest -q -p no:cacheprovider -m kafka tests/integration/spark

# The three-node Apache Kafka cluster (tests/cluster/): its harness and the
# payments pipeline across broker and coordinator fail-overs (docs/testing.md).
test-cluster: install mirror-jars
	$(PY) -m pytest -q -p no:cacheprovider -m cluster tests/cluster

test-fast: install
	$(PY) -m pytest -q -x -p no:cacheprovider tests/unit

# The stateful models under fresh random seeds, with 10x the examples of `make test`
# (tests/model_check.py): run it for any change under coordinator/ or storage/.
MODEL_CHECK_RUNS ?= 5
MODEL_CHECK_SCALE ?= 10
model-check: install
	$(PY) -m tests.model_check --runs $(MODEL_CHECK_RUNS) --scale $(MODEL_CHECK_SCALE)

# `make demo SOURCE=kafka` ingests with Spark's Kafka connector instead of the txbroker source;
# `make demo SECURE=1` runs it on SASL_SSL with SCRAM users and ACLs (docs/security.md).
SOURCE ?= txbroker
SECURE ?=
# The console's screenshots in docs/console/ (docs/console.md), taken by its browser test.
console-screenshots: install
	TXBROKER_CONSOLE_SCREENSHOTS=docs/console $(PY) -m pytest -q -p no:cacheprovider \
	  tests/integration/console/test_console_browser.py

demo: install
	$(PY) -m txbroker.spark_jobs.demo --source $(SOURCE) $(if $(SECURE),--secure)

bench: install
	$(PY) -m bench.throughput

# txbroker (both flush policies) against Apache Kafka 4: docs/performance.md.
bench-kafka: install
	$(PY) -m bench.vs_kafka --runs 3 --messages 200000

# KIP-848 against the classic group protocol: rebalance times of a 10-member
# group on txbroker and Apache Kafka, consume-transform-produce transactions/s.
bench-group-protocols: install
	$(PY) -m bench.group_protocols

# Share groups (KIP-932): ShareConsumer throughput on one partition, 1 and 4 consumers,
# on txbroker and Apache Kafka 4.4.0, and a classic consumer for reference.
bench-share: install
	$(PY) -m bench.share_groups

# Streams groups (KIP-1071): a Kafka Streams 4.4.0 exactly_once_v2 app's rebalance times
# and records/s, group.protocol=streams and classic, on txbroker and Apache Kafka 4.4.0.
bench-streams: install
	$(PY) -m bench.streams_groups

# Hostile clients: broker peak RSS and a normal client's acks=all latency.
bench-abuse: install
	$(PY) -m bench.abuse

# A long soak, not part of `make test` (bench/soak/, docs/operations.md): mixed load on a
# broker process for SOAK_MINUTES, its RSS, fds, tasks and log sampled each minute, the
# verdicts and a plot in bench/results/soak/ (exit status 1 when a goal fails).
SOAK_MINUTES ?= 30
soak: install
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) --out bench/results/soak

# This checkout's broker against BASE's, side by side (bench/compare.py, docs/testing.md):
# `make bench-compare BASE=<the commit before your change>`. BASE is required; it is
# checked before `install` so a missing one fails at once.
bench-compare: $(if $(filter bench-compare,$(MAKECMDGOALS)),$(if $(strip $(BASE)),,$(error \
  make bench-compare needs BASE, the commit to compare with: make bench-compare BASE=<commit>))) install
	$(PY) -m bench.compare --base $(BASE)

# Event-loop CPU per transaction and per MiB, this checkout against BASE, both brokers
# under the same load at once (bench/cpu_compare.py, docs/testing.md).
bench-cpu-compare: $(if $(filter bench-cpu-compare,$(MAKECMDGOALS)),$(if $(strip $(BASE)),,$(error \
  make bench-cpu-compare needs BASE: make bench-cpu-compare BASE=<commit>))) install
	$(PY) -m bench.cpu_compare --base $(BASE)

# The frame fuzzer, long-running: findings saved under tests/fuzz/regressions/.
FUZZ_FRAMES ?= 1000000
FUZZ_SEED ?= 1
fuzz: install
	$(PY) -m tests.fuzz.frames --frames $(FUZZ_FRAMES) --seed $(FUZZ_SEED) --require-coverage

serve: install
	$(VENV)/bin/txbroker serve --host 127.0.0.1 --port 9092 --data-dir ./txbroker-data

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .jvm

# Regenerate the key tables of docs/configuration.md from broker/config.py.
docs-config: install
	$(PY) -c "import pathlib, txbroker.broker.config as c; p = pathlib.Path('docs/configuration.md'); t = p.read_text(); p.write_text(t[:t.index('## Broker keys')] + c.markdown_reference())"
