"""Local Spark processes for development and tests, started from the installed PySpark."""
