# One Makefile for humans, the README and CI (.ci/run calls `make test`).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.deps-stamp

.PHONY: help venv jars build rust-lint python-lint bench-build wheel check-wheel check-wheels test lint rust-test pytest test-full torture chaos demo bench bench-capture bench-rust bench-py bench-live bench-spark fuzz captures clean

help:
	@echo "make demo      a live workload on a throwaway PostgreSQL 18 kept as Delta tables (delta-rs), then read with Spark and compared with the source"
	@echo "make test      lint, Rust tests, build the extension and wheel, pytest against PostgreSQL 15 and 18 and Spark"
	@echo "make test-full the server suites on both PostgreSQL servers throughout"
	@echo "make torture   the crash tortures in full (20 SIGKILLs each; make test runs them short)"
	@echo "make chaos     pgbench and DDL under faults for MINUTES (default 10) from SEED into SINK (delta-rs, spark, iceberg), checked against the source"
	@echo "make wheel     the abi3 manylinux2014 wheels (x86_64, aarch64), in target/wheels"
	@echo "make bench     every comparison (release build): benches/results/latest.md + ratios.png"
	@echo "make fuzz      run every proptest fuzz target for FUZZ_SECONDS (default 600) each"
	@echo "make captures  re-record the golden pgoutput captures in tests/fixtures/captures"

$(STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

# The Delta Lake jars local Spark loads (deps/pom.xml: delta-spark and its dependencies,
# from Maven Central), for pgwire_cdc.spark.session(delta=True) via $PGWIRE_CDC_DELTA_JARS.
JARS       := .cache/jars/delta
JARS_STAMP := $(JARS)/.stamp
export PGWIRE_CDC_DELTA_JARS := $(CURDIR)/$(JARS)

$(JARS_STAMP): deps/pom.xml
	rm -rf $(JARS)
	cd deps && mvn -q -B dependency:copy-dependencies -DoutputDirectory=../$(JARS) -DincludeScope=runtime
	touch $(JARS_STAMP)

# The Iceberg jars (deps/iceberg/pom.xml: the shaded Spark runtime and the SQLite JDBC
# driver of the local catalog), for session(iceberg=True) via $PGWIRE_CDC_ICEBERG_JARS.
ICEBERG_JARS       := .cache/jars/iceberg
ICEBERG_JARS_STAMP := $(ICEBERG_JARS)/.stamp
export PGWIRE_CDC_ICEBERG_JARS := $(CURDIR)/$(ICEBERG_JARS)

$(ICEBERG_JARS_STAMP): deps/iceberg/pom.xml
	rm -rf $(ICEBERG_JARS)
	cd deps/iceberg && mvn -q -B dependency:copy-dependencies -DoutputDirectory=../../$(ICEBERG_JARS) -DincludeScope=runtime
	touch $(ICEBERG_JARS_STAMP)

jars: $(JARS_STAMP) $(ICEBERG_JARS_STAMP)

# The extension tests, the demo and local work import: the `local` profile (Cargo.toml:
# the release profile's optimisation without LTO, in parallel codegen units), with the
# Delta deletion-vector writer (Cargo feature `delta`) and the test-only classes of the
# feature `test-client` (tests/client/test_pg_client.py); the features are named in full
# rather than relying on how maturin merges pyproject.toml's. Same Cargo target and zig
# linker as the x86_64 wheel of `make wheel`; installed as `maturin develop` installs
# (editable): the extension goes into python/pgwire_cdc/ and the venv imports the package
# from python/. The benches build the release profile themselves (`make bench-build`);
# `make demo`'s first build leaves the Delta writer out (FEATURES=python).
DEV_WHEELS := target/dev-wheels
PROFILE    ?= local
FEATURES   ?= python,delta,test-client
BUILT      := target/.built-features
build: venv
	rm -rf $(DEV_WHEELS)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --profile $(PROFILE) -q --zig \
	  --compatibility manylinux2014 --target x86_64-unknown-linux-gnu \
	  --features $(FEATURES) -o $(DEV_WHEELS)
	$(PIP) install -q --no-deps --force-reinstall $(DEV_WHEELS)/pgwire_cdc-*.whl
	$(PY) tools/editable.py $(DEV_WHEELS)/pgwire_cdc-*.whl python
	echo "$(FEATURES)" > $(BUILT)

# The abi3 wheels users install (release profile; the features of pyproject.toml, so no
# `test-client`): manylinux2014 (glibc 2.17: RHEL/Rocky 8, Debian 11, Ubuntu 20.04, Amazon
# Linux 2 and later) for x86_64 and aarch64, linked by zig (the pinned `ziglang` of
# requirements-dev.txt, found on PATH), no Docker. tests/wheels/test_wheel.py checks both with
# auditwheel and installs this machine's into a brand-new venv.
WHEEL_TARGETS := x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
wheel: venv
	rm -f target/wheels/pgwire_cdc-*.whl
	rustup target add $(WHEEL_TARGETS)
	for target in $(WHEEL_TARGETS); do \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --release -q --zig \
	    --compatibility manylinux2014 --target $$target -o target/wheels || exit 1; \
	done

# Clippy runs with the lints of Cargo.toml's [lints.clippy] (the pedantic group less a short
# allow-list), every warning an error.
lint: rust-lint python-lint

rust-lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --all-features -- -D warnings

python-lint: venv
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy
	@# python/pgwire_cdc/_native.pyi against the extension `make build` puts in the venv.
	$(MAKE) build PROFILE=$(PROFILE)
	$(PY) -m mypy.stubtest pgwire_cdc._native --allowlist stubtest-allowlist.txt
	@# The docs and comments speak of the project only; the module graph has no loop.
	$(VENV)/bin/pytest -q tests/docs/test_docs.py tests/docs/test_module_graph.py

# The fuzz targets (tests/fuzz) reach the client's internals through the `fuzzing` feature.
rust-test:
	cargo test --all-targets --features fuzzing

# The wheels tests/wheels/test_wheel.py checks. `make test` checks this machine's (x86_64):
# the one `make build` built — `make wheel`'s build, plus the test-only client classes —
# installed into a brand-new venv and run. `make check-wheels` adds the aarch64 one, built
# with the unoptimised `portable` profile (Cargo.toml) and checked for its manylinux tags
# and symbol versions only: a cross build of some four minutes on two cores, which
# `make test` leaves to it.
CHECK_WHEELS := target/check-wheels
check-wheel: build
	rm -rf $(CHECK_WHEELS)
	mkdir -p $(CHECK_WHEELS)
	cp $(DEV_WHEELS)/pgwire_cdc-*.whl $(CHECK_WHEELS)/

check-wheels: check-wheel
	rustup target add aarch64-unknown-linux-gnu
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --profile portable -q --zig \
	  --compatibility manylinux2014 --target aarch64-unknown-linux-gnu -o $(CHECK_WHEELS)
	PGWIRE_CDC_WHEELS=$(CURDIR)/$(CHECK_WHEELS) $(VENV)/bin/pytest -q tests/wheels

# Every pytest suite, in two tiers: the offline suites first (no PostgreSQL, no Spark: a
# broken build fails within minutes), then those against PostgreSQL 15 and 18 and Spark.
# The server tier runs as two pytest processes at once, each with servers of its own:
# the tests that need PostgreSQL alone (`-m "server and not spark"`: they spend most of
# their time waiting on the server) in the background, its report printed when both are
# done, beside those that start Spark (`-m "server and spark"`, as conftest.py marks them:
# their JVMs keep the cores busy). Each run ends with its slowest tests (--durations,
# kept in the CI log); every test has a time limit (pytest-timeout: pyproject.toml's
# default, longer where a test says so).
PYTEST := PGWIRE_CDC_WHEELS=$(CURDIR)/$(CHECK_WHEELS) $(VENV)/bin/pytest -q --durations=40
PG_LOG := target/pytest-postgresql.log
pytest: build check-wheel jars
	$(PYTEST) -m "not server"
	@echo "server tier: the tests without Spark in the background (their report at the end), those with Spark here"
	@( $(PYTEST) -m "server and not spark" > $(PG_LOG) 2>&1; echo $$? > $(PG_LOG).rc ) & \
	  $(PYTEST) -m "server and spark"; rest=$$?; \
	  wait; echo "--- the tests without Spark:"; cat $(PG_LOG); \
	  test $$rest -eq 0 && test "$$(cat $(PG_LOG).rc)" -eq 0

# The server tier with every variant: the sink, Spark, CLI and docs suites on PostgreSQL 15
# as well as 18 (`make test` runs them on 18 and the tests tests/support/server_variants.py
# lists on both).
test-full: build check-wheel jars
	PGWIRE_CDC_BOTH_SERVERS=1 $(PYTEST) -m server

# The crash tortures in full: 20 SIGKILLs each. `make test` runs the Delta ones short (5
# each) and leaves the Iceberg one and the one on S3 to this target.
TORTURES := tests/delta/test_crash_torture.py tests/iceberg/test_iceberg_torture.py \
  tests/delta/test_object_store.py::test_crash_torture_on_s3
torture: build jars
	PGWIRE_CDC_TORTURE_KILLS=20 $(VENV)/bin/pytest -q --durations=10 $(TORTURES)

# The chaos runs (tests/chaos): seeded workloads and faults for MINUTES minutes (default
# 10) from SEED (default 1) against SINK (delta-rs, spark or iceberg; default delta-rs),
# checked against the source; `make test` runs one short round of seed 1 into delta-rs.
SEED    ?= 1
MINUTES ?= 10
SINK    ?= delta-rs
chaos: build jars
	PGWIRE_CDC_CHAOS_SEED=$(SEED) PGWIRE_CDC_CHAOS_MINUTES=$(MINUTES) PGWIRE_CDC_CHAOS_SINK=$(SINK) \
	  $(VENV)/bin/pytest -q -s --durations=10 tests/chaos

# `make test` builds the extension with Cargo.toml's `ci` profile: the same code, built in
# about two thirds of the `local` profile's time from scratch. Three things run at once,
# since none fills both cores all the time: the downloads (the crates, then the Maven jars:
# a minute of network on a fresh machine); the Rust checks (fmt, clippy, the Rust tests,
# in a target directory of their own, as Cargo locks one per build); and the venv, the
# Python lint and the extension's build. Their logs are printed in that order once all are
# done; pytest starts then.
test: PROFILE = ci
test:
	@mkdir -p target
	@( ( cargo fetch -q && $(MAKE) --no-print-directory jars ) > target/downloads.log 2>&1; \
	  echo $$? > target/downloads.rc ) & \
	( CARGO_TARGET_DIR=$(CURDIR)/target/checks $(MAKE) --no-print-directory rust-lint rust-test \
	  > target/rust-checks.log 2>&1; echo $$? > target/rust-checks.rc ) & \
	  $(MAKE) --no-print-directory python-lint PROFILE=$(PROFILE); rc=$$?; wait; \
	  cat target/downloads.log target/rust-checks.log; test $$rc -eq 0 && \
	  test "$$(cat target/downloads.rc)" -eq 0 && test "$$(cat target/rust-checks.rc)" -eq 0
	$(MAKE) --no-print-directory pytest PROFILE=$(PROFILE)

# A first build for the demo leaves the Delta deletion-vector writer out (two thirds of the
# build: the deltalake crate and its dependencies), so a fresh clone runs it in minutes;
# once `make build` has built the full extension, the demo rebuilds that one.
demo: venv jars
	$(MAKE) build FEATURES=$$(cat $(BUILT) 2>/dev/null || echo python)
	$(VENV)/bin/pgwire-cdc demo

captures: build
	$(PY) tests/support/capture/record.py

# The benches measure what users install: the release profile of `make wheel` (LTO, one
# codegen unit), built and installed as `make build` installs its own.
bench-build: venv
	$(MAKE) build PROFILE=release

# Every side-by-side comparison, then benches/results/latest.md and ratios.png.
bench: bench-capture bench-rust bench-py bench-live bench-spark
	$(PY) benches/summary.py

# The 1,000,000-insert capture the benches read (benches/.cache, recorded once).
bench-capture: bench-build
	$(PY) benches/capture_stream.py

bench-rust: bench-capture
	cargo bench --bench decode

# pypgoutput is installed without its psycopg2 dependency (a source build needing libpq
# headers); benches/requirements.txt has what its modules import.
bench-py: bench-build bench-capture
	$(PIP) install -q --no-deps pypgoutput==0.0.3
	$(PIP) install -q -r benches/requirements.txt
	$(VENV)/bin/pytest benches -q --benchmark-only
	$(PY) benches/report.py
	$(PY) benches/synthetic_decode.py
	$(PY) benches/memory.py

# stream() vs pg_recvlogical and psycopg2 + pypgoutput; the snapshot vs ADBC.
bench-live: bench-build
	$(PIP) install -q --no-deps pypgoutput==0.0.3
	$(PIP) install -q -r benches/requirements.txt
	$(PY) benches/live.py
	$(PY) benches/live_shapes.py
	$(PY) benches/incremental.py

# Spark: the Arrow hand-off vs the pandas path; the Delta Lake sink (both writers) against
# the Parquet mirror baseline: end-to-end changes/s, MERGE cost against table size, lag.
bench-spark: bench-build jars bench-capture
	$(PIP) install -q -r benches/requirements.txt
	$(PY) benches/spark.py
	$(PY) benches/delta_lake.py
	$(PY) benches/iceberg_lake.py

# Each proptest fuzz target of tests/fuzz/ runs this long (seconds), one at a time so
# that each has a core to itself; the `fuzz` profile is release with overflow checks.
FUZZ_SECONDS ?= 600
fuzz:
	PGWIRE_CDC_FUZZ_SECONDS=$(FUZZ_SECONDS) cargo test --profile fuzz --features fuzzing --test fuzz -- --nocapture --test-threads=1

clean:
	rm -rf $(VENV) target
