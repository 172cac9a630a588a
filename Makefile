# The README's two commands. Both set everything up first (Java 17, .venv, the project).
.PHONY: demo test setup lint bench soak compat dist dist-check clean

demo: setup
	.venv/bin/spark-statestore demo

test: setup
	bash scripts/run-tests.sh

setup:
	bash scripts/bootstrap.sh

lint: setup
	.venv/bin/ruff check spark_statestore connectors pyspark_statestore tests
	.venv/bin/ruff format --check spark_statestore connectors pyspark_statestore tests
	bash scripts/typecheck.sh

bench: setup
	.venv/bin/spark-statestore bench

# The wheels and sdists a user installs (the package, and the compiled extension as a manylinux
# wheel with LevelDB, snappy and OpenSSL inside), in dist/.
dist: setup
	bash scripts/dist.sh

# Installs dist/'s wheels into a fresh virtualenv where Rust, a C compiler, the -dev packages
# and LevelDB's and snappy's libraries are hidden (a mount namespace; root), checks that the
# fast path runs from the wheel, then runs the tests against that install; not part of CI.
dist-check: dist
	bash scripts/dist-check.sh

# Long crash/soak variants (300 SIGKILLs of a committing store by default), then the whole
# suite again on the pure-Python reference paths (CI runs it on the compiled fast path and
# holds the two equal in tests/*/test_native_*.py); not part of CI.
soak: setup
	SPARK_STATESTORE_SOAK=1 bash scripts/run-tests.sh -m soak
	SPARK_STATESTORE_SOAK=1 bash scripts/run-tests.sh tests/cluster -m soak
	SPARK_STATESTORE_NATIVE=0 bash scripts/run-tests.sh

# The README's compatibility table (Kafka Streams apps, brokers and PySpark of other versions),
# filled by real test runs per version (tests/compat/run.py); not part of CI. A subset:
# make compat CELLS='streams-4.4.0:*,broker-3.9.2:sink' (only those cells are rewritten).
compat: setup
	.venv/bin/python -m tests.compat.run --cells '$(or $(CELLS),*)'

clean:
	rm -rf .venv build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis interop/kafka-streams/target interop/kafka-streams/target-* interop/schema-registry/target .venv-pyspark-* compat-results
