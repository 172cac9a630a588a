"""The Spark binding: the ``spark_statestore`` Python data source."""
