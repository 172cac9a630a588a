"""``python -m spark_statestore.connectors.spark.host``: the store host process."""

import sys

from spark_statestore.connectors.spark.host.server import main

sys.exit(main())
