"""``spark-statestore bench``: each path of the project against the raw limit of the same
machine, measured in one run (README.md, "spark-statestore bench").

Every measurement interleaves a candidate (a store transaction, a snapshot read, ...) with its
baseline (a bare plyvel loop doing the same work) for several rounds, keeps each side's best
rate and reports the ratio against a target. Suites are registered in
:data:`~spark_statestore.bench.suites.SUITES`; :mod:`~spark_statestore.bench.report` renders a
run as a table and as JSON.

Importing this package loads neither LevelDB nor Arrow.
"""

from spark_statestore.bench.errors import BenchError
from spark_statestore.bench.measure import BenchOptions, BenchRun, Measurement
from spark_statestore.bench.suites import SUITES, run_suites

__all__ = ["SUITES", "BenchError", "BenchOptions", "BenchRun", "Measurement", "run_suites"]
