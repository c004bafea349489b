"""What a browser page of an allowed origin (``DEALBASE_CORS_ORIGINS``) may send and read: the
API's methods, its request headers, and the response headers a client of it needs."""

from __future__ import annotations

CORS_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
CORS_REQUEST_HEADERS = [
    "Content-Type",
    "X-Api-Key",
    "X-Department-Id",
    "X-Request-Id",
    "If-Match",
    "If-None-Match",
    "Idempotency-Key",
]
CORS_RESPONSE_HEADERS = [
    "ETag",
    "Location",
    "RateLimit",
    "RateLimit-Policy",
    "Retry-After",
    "X-Request-Id",
    "Idempotent-Replayed",
]
# How long a browser may keep a preflight's answer.
CORS_MAX_AGE_SECONDS = 600
