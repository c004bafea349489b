"""Who is calling and where their data lives, one subpackage for each thing it holds:

- ``scope``: the request's Scope (tenant, schema, department, what the key may do);
- ``roles`` and ``control_tables``: the tenant roles and the control schema's tables, on
  which the migrations stand (the database runtime itself is ``dealbase.db``);
- ``callers``: API keys and the authentication of a request's caller;
- ``rate_limits``: the limits of keys, tenants and failed authentications, and admission;
- ``coordination``: what the workers of all processes share (wakeups, periodic tasks);
- ``registry``: the tenant registry and a tenant's life (provisioning, suspension, deletion,
  spare schemas, placement on a Citus cluster), which runs the migrations.
"""
