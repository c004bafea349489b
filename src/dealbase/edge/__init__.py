"""The request layer both APIs stand on: credentials to Scope, admission, request guards, the
errors' wire form, rate-limit headers, request ids and idempotency."""
