"""Executors: where jobs run. ``local`` is a thread pool on this machine."""
