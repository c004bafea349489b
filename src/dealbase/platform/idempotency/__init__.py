"""Idempotent retries of creating requests (the IETF Idempotency-Key draft).

The first response to a key is stored in the tenant's schema in the same transaction as the
write it reports, so a stored response exists exactly when the write committed.
"""
