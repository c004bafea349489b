"""SQLAlchemy Core statements rendered for a tenant: its schema written into the text, the
values apart for psycopg to bind; a statement built once compiled once."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy import (
    Insert,
    bindparam,
    func,
    insert,
    literal,
    select,
)

from dealbase.db.database import Database
from dealbase.db.statements import StatementCache, built_once
from dealbase.ids import new_id
from dealbase.platform.tables import customers
from dealbase.tenancy.scope import Scope
from tests.support import TenantWorld, row_count


def _insert_customer(last_name: str, department_id: uuid.UUID) -> tuple[Insert, dict[str, object]]:
    statement = insert(customers).values(created_at=func.now(), updated_at=func.now())
    return statement, {"id": new_id(), "department_id": department_id, "last_name": last_name}


def test_a_statement_lands_in_the_schema_of_the_unit_of_works_tenant(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = make_tenant(), make_tenant()
    statement, values = _insert_customer("Lovelace", first.department.id)
    with database.unit_of_work(first.tenant.scope) as uow:
        uow.connection.execute(statement, values)

    assert row_count(database, first.tenant.scope, customers) == 1
    assert row_count(database, second.tenant.scope, customers) == 0


def test_a_statement_is_rendered_for_each_tenants_schema_with_its_own_values(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    cache = StatementCache()
    rendered = []
    for world in (make_tenant(), make_tenant()):
        for name in ("Ada", "Grace"):
            statement = select(customers.c.id).where(customers.c.last_name == name)
            sql, values, _ = cache.render(statement, [], world.tenant.schema)
            rendered.append((world.tenant.schema, sql.decode(), list(values[0])))

    assert len(cache) == 0  # not built once: compiled each time, nothing kept
    assert [values for _, _, values in rendered] == [["Ada"], ["Grace"]] * 2
    for schema, text, _ in rendered:
        assert f"{schema}.customers" in text
        assert "tenant" not in text.replace(schema, "")


def test_a_built_once_statement_is_compiled_once_for_every_tenant(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    cache = StatementCache()
    statement = built_once(select(customers.c.id).where(customers.c.last_name == bindparam("n")))
    schemas = [make_tenant().tenant.schema for _ in range(2)]
    rendered = [cache.render(statement, [{"n": "Ada"}], schema) for schema in schemas]

    assert len(cache) == 1
    (first_sql, _, compiled), (second_sql, _, compiled_again) = rendered
    assert compiled_again is compiled
    assert f"{schemas[0]}.customers".encode() in first_sql
    assert f"{schemas[1]}.customers".encode() in second_sql


def test_the_cache_keeps_at_most_its_size(
    database: Database,
) -> None:
    cache = StatementCache(size=2)
    shapes = [built_once(select(literal(1).label(f"column_{n}"))) for n in range(3)]
    schema = Scope.for_tenant(new_id()).schema
    for shape in shapes:
        cache.render(shape, [], schema)
        assert len(cache) <= 2


def test_in_lists_of_any_length_expand_including_empty_ones(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    names = ["Ada", "Grace", "Barbara"]
    with database.unit_of_work(world.tenant.scope) as uow:
        for name in names:
            statement, values = _insert_customer(name, world.department.id)
            uow.connection.execute(statement, values)
        for asked in ([], ["Ada"], names):
            found = uow.connection.execute(
                select(customers.c.last_name).where(customers.c.last_name.in_(asked))
            ).all()
            assert sorted(row[0] for row in found) == sorted(asked)


def test_a_statement_built_once_renders_as_any_other_for_each_tenant_and_its_own_values(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    def shape() -> Insert:
        # A literal of its own (the 2) besides the values a caller gives.
        return insert(customers).values(
            created_at=func.now(), updated_at=func.now(), version=literal(2)
        )

    marked, plain = built_once(shape()), shape()
    cache = StatementCache()
    for world in (make_tenant(), make_tenant(), make_tenant()):
        for last_name in ("Ada", "O'Brien"):
            values = {"id": new_id(), "department_id": world.department.id, "last_name": last_name}
            assert (
                cache.render(marked, [values], world.tenant.schema)[:2]
                == cache.render(plain, [values], world.tenant.schema)[:2]
            )

    world = make_tenant()
    with database.unit_of_work(world.tenant.scope) as uow:
        for last_name in ("Ada", "Grace"):
            uow.connection.execute(
                marked,
                {"id": new_id(), "department_id": world.department.id, "last_name": last_name},
            )
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(customers.c.last_name, customers.c.version).order_by(customers.c.last_name)
        ).all()
    assert rows == [("Ada", 2), ("Grace", 2)]


def test_a_statement_built_once_with_other_parameter_names_or_an_in_list_is_rendered_afresh(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    department = world.department.id
    cache = StatementCache()
    inserting = built_once(insert(customers).values(created_at=func.now(), updated_at=func.now()))
    short = {"id": new_id(), "department_id": department, "last_name": "Ada"}
    longer = {**short, "first_name": "Augusta"}
    cache.render(inserting, [short], world.tenant.schema)
    sql, values, _ = cache.render(inserting, [longer], world.tenant.schema)
    assert b"first_name" in sql
    assert "Augusta" in values[0]

    listing = built_once(
        select(customers.c.id).where(customers.c.last_name.in_(bindparam("names", expanding=True)))
    )
    for names in (["Ada"], ["Ada", "Grace", "Hedy"]):
        sql, values, _ = cache.render(listing, [{"names": names}], world.tenant.schema)
        assert sql.count(b"$") == len(names) and values == [names]


def test_a_statement_built_once_with_an_in_list_is_compiled_once_and_expanded_per_call(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    cache = StatementCache()
    listing = built_once(
        select(customers.c.id).where(
            customers.c.last_name.in_(bindparam("names", expanding=True)),
            customers.c.city.in_(["Paris", "Rome"]),
        )
    )
    rendered = [
        cache.render(listing, [{"names": names}], world.tenant.schema)
        for names in (["Ada"], ["Ada", "Grace", "Hedy"], ["Ada"])
    ]

    compiled = {id(entry) for _, _, entry in rendered}
    assert len(compiled) == 1
    assert [sql.count(b"$") for sql, _, _ in rendered] == [3, 5, 3]
    assert [values for _, values, _ in rendered] == [
        [["Ada", "Paris", "Rome"]],
        [["Ada", "Grace", "Hedy", "Paris", "Rome"]],
        [["Ada", "Paris", "Rome"]],
    ]
