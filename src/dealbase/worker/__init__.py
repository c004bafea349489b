"""Background work: webhook delivery and the events purge; tenant-aware, no HTTP server."""
