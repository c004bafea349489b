"""Standard Webhooks signatures (https://www.standardwebhooks.com/): what a receiver checks to
know a request came from us, unchanged, and recently."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

from dealbase.platform.webhooks.service import SECRET_PREFIX

SIGNATURE_VERSION = "v1"


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,`` and the base64 of HMAC-SHA256 over ``{id}.{timestamp}.{body}``, keyed with the
    bytes the secret encodes after ``whsec_``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def headers(secrets: Iterable[str], message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a delivery: during a rotation's overlap, one signature per secret
    (the new first), separated by a space, so a receiver holding either accepts it."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, message_id, timestamp, body) for secret in secrets
        ),
    }
