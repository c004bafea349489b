# The two set-up commands are `make run` and `make test`; both install what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lock run test test-under-load lint typecheck pytest migrate demo clean bench bench-scale bench-citus-scale bench-citus-network profile

# What is installed is what uv.lock says, exactly (hashes included): the lock is made with uv,
# which the first `make install` installs for the project in .tools/ (pinned here). `make lock`
# upgrades every package within pyproject.toml's ranges; commit the uv.lock it writes.
UV_VERSION := 0.13.9
UV := .tools/bin/uv
# --inexact: what the bench extra added stays.
UV_SYNC = $(UV) sync --locked --inexact --python $(PYTHON)

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

install: $(STAMP)

$(STAMP): pyproject.toml uv.lock | $(UV)
	$(UV_SYNC) --extra dev
	@touch $(STAMP)

lock: $(UV)
	$(UV) lock --upgrade

# The API and one webhook worker beside it (stopped with it); both on the same database, the
# embedded one included (pgserver keeps it up while either runs).
run: install
	$(BIN)/dealbase migrate
	$(BIN)/dealbase demo
	$(BIN)/dealbase worker & worker=$$!; trap 'kill $$worker 2>/dev/null' EXIT; $(BIN)/dealbase serve

# mypy runs beside the tests: it needs one core for a minute on a fresh clone, and the tests'
# processes wait on the database and their servers often enough to leave it room.
test: install lint
	@$(MAKE) --no-print-directory -j2 typecheck pytest

# `make test` beside LOAD_LOOPS busy CPU loops (two by default), stopped with it: the check that no
# test depends on the machine's speed (tests/README.md, "A busy machine").
LOAD_LOOPS ?= 2
test-under-load: install
	@loops=""; \
	for _ in $$(seq 1 $(LOAD_LOOPS)); do sh -c 'while :; do :; done' & loops="$$loops $$!"; done; \
	trap 'kill $$loops 2>/dev/null' EXIT INT TERM; \
	echo "test-under-load: $(LOAD_LOOPS) busy loops beside make test (pids$$loops)"; \
	$(MAKE) test

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo
	$(BIN)/deptry src
	$(BIN)/python tools/private_names.py

typecheck: install
	$(BIN)/mypy

# The tests run in TEST_WORKERS processes at once (pytest-xdist; twice the cores, since many tests
# wait on a server, a subprocess or the database), each on databases of its own; the tests marked
# `serial` (they bound a time, or change what the whole server or the Citus cluster shares) then
# run in one process (all in tests/: contract_tests/conftest.py refuses a serial mark there, so
# that pass need not collect the contract suites). A second pass of the REST and GraphQL tests
# and the isolation fuzz runs their apps through the pgbouncer at DEALBASE_TEST_PGBOUNCER_URL
# (transaction mode, a server pool of 1 per database), when set; .ci/run starts one, and under
# CI=true its absence fails the run. Where a PostgreSQL and a pgbouncer of its own are given
# (DEALBASE_TEST_BOUNCED_DATABASE_URL and DEALBASE_TEST_BOUNCED_PGBOUNCER_URL, as .ci/run starts
# them), that pass runs on them beside the serial one, which leaves a core idle most of its
# time; its output follows the serial pass's. Bytecode and pytest's rewritten test modules are
# cached in __pycache__ even where the environment says not to: without the cache every test
# process compiles them again (5 s a process). README.md: one module or one test, quickly;
# tests/README.md: how a run is organised and where its time goes.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
PYTEST_PARALLEL = $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal -m "not serial"
PYTEST_SERIAL = $(BIN)/pytest -m serial
BOUNCED_TESTS = tests/rest_api tests/graphql_api tests/db/test_isolation_fuzz.py
PYTEST_BOUNCED = DEALBASE_TEST_THROUGH_PGBOUNCER=1 $(PYTEST_PARALLEL) $(BOUNCED_TESTS) \
	&& DEALBASE_TEST_THROUGH_PGBOUNCER=1 $(PYTEST_SERIAL) $(BOUNCED_TESTS)
BOUNCED_LOG := .pytest-through-pgbouncer.log
# The serial pass as two processes side by side: the tests on the Citus cluster and the others
# share no PostgreSQL server (tests/conftest.py, --serial-tier); the first's output follows.
CITUS_SERIAL_LOG := .pytest-serial-citus.log
SERIAL_PASS = { $(PYTEST_SERIAL) --serial-tier citus tests > $(CITUS_SERIAL_LOG) 2>&1 & on_citus=$$!; \
	$(PYTEST_SERIAL) --serial-tier server tests; on_server=$$?; wait $$on_citus; citus=$$?; \
	echo "pytest: the serial tests on the Citus cluster (beside the others)"; cat $(CITUS_SERIAL_LOG); \
	[ $$on_server -eq 0 ] && [ $$citus -eq 0 ]; }

pytest: export PYTHONDONTWRITEBYTECODE =
pytest: install
	$(PYTEST_PARALLEL)
	@if [ -n "$$DEALBASE_TEST_BOUNCED_DATABASE_URL" ] && [ -n "$$DEALBASE_TEST_BOUNCED_PGBOUNCER_URL" ]; then \
	  echo "pytest: the serial tests, and beside them the REST and GraphQL tests and the isolation fuzz again, through pgbouncer"; \
	  (export DEALBASE_TEST_DATABASE_URL="$$DEALBASE_TEST_BOUNCED_DATABASE_URL" \
	    DEALBASE_TEST_PGBOUNCER_URL="$$DEALBASE_TEST_BOUNCED_PGBOUNCER_URL"; $(PYTEST_BOUNCED)) \
	    > $(BOUNCED_LOG) 2>&1 & bounced=$$!; \
	  $(SERIAL_PASS); serial=$$?; \
	  wait $$bounced; through=$$?; \
	  echo "pytest: through pgbouncer (beside the serial tests)"; cat $(BOUNCED_LOG); \
	  exit $$(( serial || through )); \
	fi; \
	$(SERIAL_PASS) || exit; \
	if [ -n "$$DEALBASE_TEST_PGBOUNCER_URL" ]; then \
	  echo "pytest: the REST and GraphQL tests and the isolation fuzz again, through pgbouncer"; \
	  $(PYTEST_BOUNCED); \
	elif [ "$$CI" = true ]; then \
	  echo "CI=true but DEALBASE_TEST_PGBOUNCER_URL is not set: .ci/run starts pgbouncer" >&2; \
	  exit 1; \
	else \
	  echo "pytest: DEALBASE_TEST_PGBOUNCER_URL unset, so the pass through pgbouncer did not run"; \
	fi

migrate: install
	$(BIN)/dealbase migrate

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Benchmarks (bench/README.md): `make bench` loads dealbase beside its peers and prints one table;
# `make profile SCENARIO=post_customers_one_department` records one scenario with py-spy. Both
# read their settings from the environment or the command line (BENCH_SECONDS=3,
# DEALBASE_BENCH_DATABASE_URL=...).
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(UV_SYNC) --extra dev --extra bench
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py bench

# Many tenants on one PostgreSQL (bench/README.md, "scale.py"): provisioning, migrate, POST
# /customers spread over every tenant, backend memory, the catalog. N tenants (default 1000).
N ?= 1000
bench-scale: $(BENCH_STAMP)
	$(BIN)/python bench/scale.py --tenants $(N)

# dealbase on the Citus cluster beside the single server, in one run (bench/README.md,
# "citus.py"): provisioning, POST /customers and the GraphQL dashboard as ratios, and a tenant of
# 10,000 customers moved under writes and webhook deliveries. The cluster: ../shared/citus/.
bench-citus: $(BENCH_STAMP)
	$(BIN)/python bench/citus.py

# bench-scale's provisioning and migrations on the Citus cluster, in a database of its own there,
# then `dealbase tenant rebalance` under four writers (bench/README.md, "citus_scale.py").
# CROWDED tenants are made on one worker alone to give the rebalancer something to move.
CROWDED ?= 300
bench-citus-scale: $(BENCH_STAMP)
	$(BIN)/python bench/citus_scale.py --tenants $(N) --crowded $(CROWDED)

# What a request costs with DELAY_MS (each way) between the Citus coordinator and its workers,
# made by user-space TCP proxies (bench/harness/delay.py; the kernel here has no netem), in a
# database of its own on the cluster (bench/citus_network.py's docstring).
DELAY_MS ?= 0.5
bench-citus-network: $(BENCH_STAMP)
	$(BIN)/python bench/citus_network.py --delay-ms $(DELAY_MS)

profile: $(BENCH_STAMP)
	@test -n "$(SCENARIO)" || { echo "usage: make profile SCENARIO=<name>; the names: $(BIN)/python bench/run.py profile --help" >&2; exit 2; }
	$(BIN)/python bench/run.py profile --scenario '$(SCENARIO)'
