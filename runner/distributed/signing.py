"""Job and record signatures: HMAC-SHA256 with the fleet's job key.

Redis is a shared blackboard: anyone who can write to it could otherwise put a
job on a queue (and make workers run an agent of their choosing) or put a
record on a run's stream (and fake a pass). So the coordinator signs every job
it sends, a worker runs only jobs signed with its own job key, and signs every
record it publishes; the coordinator keeps only records signed with its key.

A job message is ``{"job": ..., "image": TAG, "image_id": ID, "sig": ...}``: the
signature covers every field but ``sig``. The job names its protocol by SHA-256
and the worker checks the protocol bundle against that hash (``bundle.load``), so
the signature covers the bundle, the suite and every blob the job reaches; and
the image ID is the one its sandboxes are made from, whatever Redis's published
image entries or the worker's tags say.

Each kind of message is signed under its own label, so a signature taken from a
record cannot be replayed as a job's. Pure: no I/O; keys come from
``runner.distributed.credentials``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

SCHEME = "hmac-sha256"
_JOB = b"deltarun job v1\n"
_RECORD = b"deltarun record v1\n"
_IMAGE = b"deltarun image v1\n"


def fingerprint(key: bytes) -> str:
    """A short public name for a key (its SHA-256, 12 hex digits): safe to print and log."""
    return hashlib.sha256(b"deltarun key fingerprint\n" + key).hexdigest()[:12]


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _mac(key: bytes, label: bytes, body: bytes) -> str:
    return f"{SCHEME}:{hmac.new(key, label + body, hashlib.sha256).hexdigest()}"


def sign_job(key: bytes, message: dict[str, Any]) -> str:
    """The signature of a job message: every field but ``sig``, in canonical JSON."""
    return _mac(key, _JOB, _canonical({k: v for k, v in message.items() if k != "sig"}))


def job_refusal(key: bytes, payload: Any) -> str | None:
    """Why a job message must not run (no signature, another key, a changed job), or None."""
    if not isinstance(payload, dict) or not isinstance(payload.get("job"), dict):
        return "not a deltarun job message"
    signature = payload.get("sig")
    if not isinstance(signature, str) or not signature:
        return "unsigned job"
    if not hmac.compare_digest(signature, sign_job(key, payload)):
        return "signature does not match this worker's job key"
    return None


def sign_image(key: bytes, tag: str, image_id: str, ref: str | None) -> str:
    """The signature of a published image entry: which image a worker may pull for a tag."""
    return _mac(key, _IMAGE, _canonical([tag, image_id, ref]))


def sign_record(key: bytes, raw: str) -> str:
    """The signature of a record as published (its exact JSON text)."""
    return _mac(key, _RECORD, raw.encode())


def record_signed(key: bytes, raw: str, signature: str | None) -> bool:
    return signature is not None and hmac.compare_digest(signature, sign_record(key, raw))
