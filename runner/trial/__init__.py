"""One job: the agent phase in sandbox A, the patch, the verify phase's call, the record."""
