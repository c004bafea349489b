"""Who is calling and where their data lives: the tenant registry, API keys, the request Scope
and the tenant-bound unit of work."""
