"""The controls of a run: the models (pure) and their loader (YAML, digests, hash)."""
