"""The Celery application: JSON only, late acks, one message per process at a time.

Each setting and why:

- ``task_serializer/accept_content = json``: payloads are plain data; no pickle ever
  crosses the broker.
- ``task_acks_late``: a message is acknowledged after the trial, so a worker that
  dies mid-trial leaves it in Redis to be delivered again.
- ``task_reject_on_worker_lost``: a killed pool child requeues its message instead
  of acknowledging it as failed.
- ``worker_prefetch_multiplier = 1``: a process reserves one trial at a time, so a
  slow trial never holds others hostage on a busy worker.
- ``visibility_timeout`` (Redis transport): an unacknowledged message is delivered
  again after this long. It must exceed the longest trial (agent timeout + verify
  timeout + margins); ``VISIBILITY_TIMEOUT_S`` is the default for both the worker
  and the coordinator, ``--visibility-timeout`` changes it. A duplicate delivery is
  harmless: the lease and the done set turn it into a skip.
- ``broker_connection_retry_on_startup`` and unlimited retries: a worker started
  before Redis, or across a Redis restart, waits for it instead of exiting.
- ``task_ignore_result``: records travel through the ledger stream, not a result backend.
"""

from __future__ import annotations

from celery import Celery

VISIBILITY_TIMEOUT_S = 7200


def make_app(broker_url: str, visibility_timeout_s: int = VISIBILITY_TIMEOUT_S) -> Celery:
    app = Celery("deltarun", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport_options(visibility_timeout_s),
        broker_connection_retry_on_startup=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        enable_utc=True,
    )
    return app


def transport_options(visibility_timeout_s: int) -> dict[str, int]:
    """Redis transport options; a short visibility timeout is also checked more often.

    kombu sweeps for messages past their visibility timeout every
    ``unacked_restore_interval`` seconds, and since kombu 5.7 only on every
    ``unacked_restore_throttle``-th tick (10 by default): the throttle is set to 1 so
    the interval alone says how late a lost message is found (unknown options are
    ignored by older kombu)."""
    options = {"visibility_timeout": visibility_timeout_s, "unacked_restore_throttle": 1}
    if visibility_timeout_s < 60:
        options["unacked_restore_interval"] = max(1, visibility_timeout_s // 2)
    return options


def required_visibility_s(longest_trial_s: float) -> int:
    """The smallest safe visibility timeout for a run: twice its longest trial plus 5 minutes."""
    return int(2 * longest_trial_s + 300)
