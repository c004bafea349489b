"""The role switch on a Citus cluster: a tenant's role reaches the worker that holds another
tenant's schema as itself, and that worker refuses it, whatever the application routed."""

from __future__ import annotations

import psycopg
import pytest

from dealbase.db.database import Database
from dealbase.tenancy.roles import switch_to_tenant
from tests.support import TenantWorld, build_tenant


def _worker_of(citus_url: str, schema: str) -> str:
    with psycopg.connect(citus_url) as connection:
        row = connection.execute(
            "SELECT DISTINCT nodename, nodeport FROM citus_shards WHERE table_name::text = %s",
            (f"{schema}.customers",),
        ).fetchone()
    assert row is not None, f"{schema} has no placement"
    host, port = row
    return citus_url.replace("127.0.0.1:9700", f"{host}:{port}")


@pytest.fixture
def neighbour(cluster_database: Database) -> TenantWorld:
    return build_tenant(cluster_database, distributed=True)


def test_a_tenants_role_is_refused_another_tenants_schema_through_the_coordinator(
    citus_url: str, cluster_world: TenantWorld, neighbour: TenantWorld
) -> None:
    begin, become = switch_to_tenant(cluster_world.tenant.schema)
    with psycopg.connect(citus_url, autocommit=True) as connection:
        connection.execute(begin)
        connection.execute(become)
        own = connection.execute(f'SELECT count(*) FROM "{cluster_world.tenant.schema}".customers')
        assert own.fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(f'SELECT count(*) FROM "{neighbour.tenant.schema}".customers')
        connection.execute("ROLLBACK")


def test_a_tenants_role_is_refused_another_tenants_schema_on_the_worker_that_holds_it(
    citus_url: str, cluster_world: TenantWorld, neighbour: TenantWorld
) -> None:
    """Straight to the worker, as the coordinator's connections arrive there: the worker's own
    grants refuse the role the neighbour's tables (their shards)."""
    worker = _worker_of(citus_url, neighbour.tenant.schema)
    with psycopg.connect(worker, autocommit=True) as connection:
        shards = connection.execute(
            "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
            " WHERE schemaname = %s AND tablename LIKE 'customers%%'",
            (neighbour.tenant.schema,),
        ).fetchall()
        assert shards, "the worker holds none of the neighbour's tables"
        connection.execute(f'SET ROLE "{cluster_world.tenant.schema}"')
        for (shard,) in shards:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(f"SELECT count(*) FROM {shard}")
