"""Distribution over Celery on Redis: Celery is the transport, Redis keeps leases and records.

- ``keys``: every Redis key deltarun uses, in one place.
- ``celery_app``: the Celery application and its settings (why each one is set).
- ``blobs``: content-addressed archives in Redis, cached and verified on the worker's disk.
- ``bundle``: the protocol bundle a worker needs to run a job of a protocol.
- ``ledger``: leases, the done set and the record stream.
- ``registry``: sandbox images pushed to a registry and pulled by digest, trusted by image ID.
- ``worker``: the worker's serve loop; ``startup`` its checks before any job, ``trial_task``
  the Celery task (a thin adapter around ``execute_trial``), ``served_images`` the images
  it serves, ``worker_state`` what each pool process keeps.
- ``coordinator``: publishing jobs and collecting records into ``trials.jsonl``.
"""
