"""Executors: where a prepared run's jobs run. ``contract`` is what every executor is handed
and hands back; ``local`` is a thread pool on this machine. The Celery coordinator lives
beside its workers in ``runner.distributed``."""
