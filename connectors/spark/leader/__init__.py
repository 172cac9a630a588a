"""The sink's leader store: opening it and committing to it, in the commit process or in
the sink's store server (option ``serve``), which keeps the store open, serves it over
Arrow Flight and announces it as the leader while the query runs."""
