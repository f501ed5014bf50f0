"""The client: its transport (connection, wire format, acknowledgements, batch index
checks), opening and resuming pipelines, failover, data-parallel jobs, the CLI, and the
definition contract's imports."""
