"""``python -m spark_statestore.cli``: the ``spark-statestore`` command."""

from __future__ import annotations

import sys

from spark_statestore.cli.main import main

sys.exit(main())
