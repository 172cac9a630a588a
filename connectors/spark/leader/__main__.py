"""``python -m spark_statestore.connectors.spark.leader``: the sink's store server process."""

import sys

from spark_statestore.connectors.spark.leader.server import main

sys.exit(main())
