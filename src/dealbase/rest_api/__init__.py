"""The integration REST API under /api/v1/integration: thin adapters over ``dealbase.platform``."""
