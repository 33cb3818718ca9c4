# The two commands a newcomer needs: `make demo` and `make test`.  Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORE := $(VENV)/.core

.PHONY: demo cluster-demo test test-fast lint typecheck pytest bench docs core-header golden report-shots system-deps otel-newest proto clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The compiled parts (the reading core, ringtrace/stages/_core_src/*.c, and the Perfetto encoder,
# ringtrace/sinks/perfetto/_encode.c; built in place by the install above), rebuilt when a source changes.
# Without a C compiler the build says so in one line and ringtrace uses its pure-Python path.
CORE_SOURCES := $(wildcard ringtrace/stages/_core_src/*.c ringtrace/stages/_core_src/*.h) ringtrace/sinks/perfetto/_encode.c
$(CORE): $(STAMP) $(CORE_SOURCES)
	$(BIN)/python setup.py -q build_ext --inplace
	touch $(CORE)

# the C sources' copy of the Python tables (ringtrace/stages/_core_src/tables.h), written again from them;
# tests/stages/test_core_header.py fails when it is stale
core-header: $(STAMP)
	$(BIN)/python -m ringtrace.stages.core_header

# Debian packages the tests drive for real (Prometheus server and promtool, Alertmanager, Chromium).
system-deps:
	bash scripts/system-deps.sh

demo: $(STAMP) $(CORE)
	$(BIN)/ringtrace demo

# The cluster on one machine (tests/e2e/cluster_demo.py): 8 agents, four 128-rank runs written live, a real
# Prometheus and Alertmanager with the shipped configs; prints where to look and each notification. Ctrl-C stops.
cluster-demo: $(STAMP) $(CORE) system-deps
	$(BIN)/python -m tests.e2e.cluster_demo

lint: $(STAMP)
	$(BIN)/ruff check ringtrace tests deploy docs setup.py
	$(BIN)/lint-imports  # the layering contracts in pyproject.toml

# deploy/grafana/build_dashboards.py: the SDK's typed builders check every panel, query and option; the promtool tests' generator is typed too (a moved module fails here, not in the slow test that runs it)
typecheck: $(STAMP)
	$(BIN)/mypy ringtrace tests docs/generate.py deploy/grafana/build_dashboards.py deploy/prometheus/tests/build_real_runs.py

# The OpenTelemetry packages are not pinned: every `make test` upgrades them to the newest
# release the registry has (within protobuf < 8, which the Perfetto module needs), so the
# tests run against what a user installing today gets, not what this venv once resolved.
# Offline (no package index) a laptop tests what is installed; in CI (CI=true) that is a failure.
otel-newest: $(STAMP)
	$(BIN)/python -m pip install -q --upgrade 'protobuf>=7.35.1,<8' opentelemetry-api opentelemetry-sdk \
		opentelemetry-proto opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-http \
		|| { [ "$$CI" != "true" ] && echo "otel-newest: no package index reachable; testing the installed OpenTelemetry"; }
	@$(BIN)/python -c "from importlib.metadata import version as v; print('OpenTelemetry under test: sdk', v('opentelemetry-sdk'), 'proto', v('opentelemetry-proto'))"

# The whole suite on the compiled core (where it was built; tests/stages/test_core.py compares it with the
# pure path in every run), then the stage, reading and golden tests again on the pure-Python path (not
# test_core.py: it runs both paths whatever RINGTRACE_PURE says).
pytest: $(STAMP) $(CORE) system-deps otel-newest
	$(BIN)/pytest -q
	RINGTRACE_PURE=1 $(BIN)/pytest -q tests/stages tests/reading tests/test_golden.py --ignore=tests/stages/test_core.py

test: lint typecheck pytest

# unit and golden tests only (pytest -m "not slow": no watch processes, servers or browsers), on two
# workers (pytest-xdist): under a minute on two cores; tests/conftest.py says what is slow
test-fast: $(STAMP) $(CORE)
	$(BIN)/pytest -q -m "not slow" -n 2

# the tables of docs/ that the code holds (metrics, settings, options, error codes); tests/test_docs.py
# fails when they are stale
docs: $(STAMP)
	$(BIN)/python docs/generate.py

# every golden case's expected outputs (summary, check and each exporter's) written again from the code;
# review the diff before committing (tests/golden/README.md)
golden: $(STAMP)
	UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/test_golden.py

# the report's screenshots that docs/outputs.md shows: written by its tests in real Chromium, copied to docs/img/
REPORT_SHOTS := wedged failed program l3 l3-eight-ranks zoomed
report-shots: $(STAMP)
	$(BIN)/pytest -q tests/report
	for n in $(REPORT_SHOTS); do cp test-artifacts/report/$$n.png docs/img/report-$$n.png; done

bench: $(STAMP) $(CORE)
	$(BIN)/python tests/bench/bench_summary.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build ringtrace/stages/_core*.so
