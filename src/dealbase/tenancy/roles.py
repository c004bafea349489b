"""The PostgreSQL roles that make the database itself keep tenants apart.

Each tenant has a role named after its schema (``t_<id>``): it may use that schema and read and
write its tables, and nothing else. Every unit of work becomes the tenant's role for its
transaction only (``database.Database``), so a statement that names another tenant's schema,
whatever the application's routing did, is refused by PostgreSQL with a permission error.

The tenant schemas and their objects belong to ``dealbase_owner``; migrations become it to change a
tenant's tables. On a single server neither it nor a tenant role can log in. On a Citus cluster
both can (``login``): Citus opens its connections to the workers as the current role, so a
statement run as a tenant's role reaches the worker that holds the tenant's schema as that role,
and the worker refuses it any other schema (docs/security.md, "On a Citus cluster"). The login role the service connects as holds
no privilege on any tenant schema: it is a member of these roles only so that it may switch to
them (``SET ROLE``), and it must not inherit their privileges (PostgreSQL 16 and later: each
membership is granted ``INHERIT FALSE``; on 15, the login role is created ``NOINHERIT``:
docs/operations.md, "The database login role").

Everything here runs inside the migrator's transaction, and checks before it changes: running it
again on a tenant whose roles and grants are as they should be writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, Row, text

from dealbase.db.sessions import switch_to
from dealbase.tenancy.scope import tenant_role

TENANT_OWNER_ROLE = "dealbase_owner"
# Every tenant role is a member, and through it may do the one thing tenants share: ask the
# webhook worker to visit their own schema (a row in ``control.webhook_wakeups``, whose row
# security admits only the member's own schema name).
TENANTS_GROUP_ROLE = "dealbase_tenants"
# The migration bookkeeping of each tenant schema: only migrations touch it, the tenant's role
# gets no privilege on it.
MIGRATION_TABLE = "alembic_version"

# What a tenant's role is granted, by kind of object in its schema.
_SCHEMA_PRIVILEGES = frozenset({"USAGE"})
_TABLE_PRIVILEGES = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"})
_READ_ONLY_PRIVILEGES = frozenset({"SELECT"})
_SEQUENCE_PRIVILEGES = frozenset({"USAGE", "SELECT"})
_PRIVILEGES_BY_RELATION_KIND = {
    "r": ("TABLE", _TABLE_PRIVILEGES),
    "p": ("TABLE", _TABLE_PRIVILEGES),
    "v": ("TABLE", _READ_ONLY_PRIVILEGES),
    "m": ("TABLE", _READ_ONLY_PRIVILEGES),
    "f": ("TABLE", _READ_ONLY_PRIVILEGES),
    "S": ("SEQUENCE", _SEQUENCE_PRIVILEGES),
}
# Roles are looked up with ``to_regrole`` (the role cache), never by joining ``pg_roles`` on a
# name: such a join is planned on the shared catalogs' statistics, which nothing may have
# gathered since the first tenants, as a nested loop of sequential scans, quadratic in the number
# of tenant roles. The same goes for ``pg_get_userbyid``.
# A tenant role is a plain role, able to log in on a cluster only: anything more is drift to undo.
_PLAIN_ATTRIBUTES = "NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"


def _plain_role(*, login: bool) -> str:
    return f"{'LOGIN' if login else 'NOLOGIN'} {_PLAIN_ATTRIBUTES}"


def switch_to_tenant(schema: str) -> tuple[str, str]:
    """The statements that open a unit of work's transaction as the tenant's role."""
    return switch_to(tenant_role(schema))


def ensure_shared_roles(connection: Connection, *, login: bool = False) -> list[str]:
    """Creates ``dealbase_owner`` and ``dealbase_tenants`` if missing, lets the login role
    switch to the owner, and lets the owner log in exactly when ``login`` (a Citus cluster: its
    LOGIN must have committed before its first DDL reaches a worker). ``migrate`` runs it once
    (with the control schema's upgrade, whose grants name the group) before its workers upgrade
    tenants in parallel, so that they do not race to grant the same membership or to alter the
    owner. Runs as the login role; returns what it changed."""
    changes = _create_shared_roles(connection, login=login)
    return changes + _login_as_wanted(connection, TENANT_OWNER_ROLE, login=login)


def _create_shared_roles(connection: Connection, *, login: bool) -> list[str]:
    changes = _ensure_switchable_role(connection, TENANT_OWNER_ROLE, login=login)
    if _create_role(connection, TENANTS_GROUP_ROLE, login=False):
        changes.append(f"created role {TENANTS_GROUP_ROLE}")
    return changes


def ensure_roles(connection: Connection, schema: str, *, login: bool = False) -> list[str]:
    """Creates the owner and tenant roles if missing (able to log in when ``login``: a Citus
    cluster; a tenant role that exists is made so too), lets the login role switch to them, and hands any object of the schema that is not
    the owner's to it (schemas created before tenant roles belonged to the login role). Runs as
    the login role; returns what it changed."""
    role = tenant_role(schema)
    # The owner's attributes are migrate's to set (ensure_shared_roles), once: tenants made or
    # upgraded at the same time would race to alter the one role.
    changes = _create_shared_roles(connection, login=login)
    changes += _ensure_switchable_role(connection, role, login=login)
    changes += _make_plain(connection, role, login=login)
    changes += _join_tenants_group(connection, role)
    changes += _adopt(connection, schema)
    return changes


def _ensure_switchable_role(connection: Connection, name: str, *, login: bool) -> list[str]:
    changes = []
    if _create_role(connection, name, login=login):
        changes.append(f"created role {name}")
    login_is_superuser, server_version = connection.execute(
        text(
            "SELECT rolsuper, current_setting('server_version_num')::int"
            " FROM pg_roles WHERE oid = to_regrole(quote_ident(session_user))"
        )
    ).one()
    # A superuser may switch to any role; anyone else needs the membership.
    if not login_is_superuser and not _login_is_member(connection, name, server_version):
        # From PostgreSQL 16 a membership says itself whether it passes privileges on.
        options = " WITH INHERIT FALSE, SET TRUE" if server_version >= 160000 else ""
        connection.execute(text(f'GRANT "{name}" TO SESSION_USER{options}'))
        changes.append(f"granted role {name} to the login role")
    return changes


def _create_role(connection: Connection, name: str, *, login: bool) -> bool:
    exists = connection.execute(
        text("SELECT to_regrole(quote_ident(:name)) IS NOT NULL"), {"name": name}
    ).scalar_one()
    if exists:
        return False
    # Roles belong to the whole cluster: another database's migrator may create the same one
    # between the check and here, which is as good as creating it.
    connection.execute(
        text(
            "DO $$ BEGIN"
            f' CREATE ROLE "{name}" {_plain_role(login=login)};'
            " EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;"
            " END $$"
        )
    )
    return True


def _login_is_member(connection: Connection, name: str, server_version: int) -> bool:
    """Whether the login role may switch to the role. From PostgreSQL 16 a membership may deny
    it (the one a role's creator gets, ``SET FALSE``), so the SET option is what counts."""
    option = "SET" if server_version >= 160000 else "MEMBER"
    return bool(
        connection.execute(
            text("SELECT pg_has_role(session_user, to_regrole(quote_ident(:name)), :option)"),
            {"name": name, "option": option},
        ).scalar()
    )


def _login_as_wanted(connection: Connection, role: str, *, login: bool) -> list[str]:
    can_login = connection.execute(
        text("SELECT rolcanlogin FROM pg_roles WHERE oid = to_regrole(quote_ident(:role))"),
        {"role": role},
    ).scalar_one()
    if can_login == login:
        return []
    connection.execute(text(f'ALTER ROLE "{role}" {"LOGIN" if login else "NOLOGIN"}'))
    return [f"let role {role} log in (a Citus cluster)" if login else f"made role {role} NOLOGIN"]


def _make_plain(connection: Connection, role: str, *, login: bool) -> list[str]:
    """Undoes attributes and memberships a tenant role should not have (any but the group's;
    LOGIN anywhere but on a cluster, where it needs it)."""
    changes = []
    attributes = connection.execute(
        text(
            "SELECT rolcanlogin <> :login OR rolsuper OR rolcreatedb OR rolcreaterole"
            " OR rolreplication OR rolbypassrls"
            " FROM pg_roles WHERE oid = to_regrole(quote_ident(:role))"
        ),
        {"role": role, "login": login},
    ).scalar_one()
    if attributes:
        connection.execute(text(f'ALTER ROLE "{role}" {_plain_role(login=login)}'))
        changes.append(f"made role {role} a plain role again")
    memberships = connection.execute(
        text(
            "SELECT pg_get_userbyid(roleid) FROM pg_auth_members"
            " WHERE member = to_regrole(quote_ident(:role))"
            " AND roleid <> to_regrole(quote_ident(:group)) ORDER BY 1"
        ),
        {"role": role, "group": TENANTS_GROUP_ROLE},
    ).scalars()
    for granted in memberships:
        connection.execute(text(f'REVOKE "{granted}" FROM "{role}"'))
        changes.append(f"revoked role {granted} from {role}")
    return changes


def _join_tenants_group(connection: Connection, role: str) -> list[str]:
    joined = connection.execute(
        text(
            "SELECT 1 FROM pg_auth_members"
            " WHERE member = to_regrole(quote_ident(:role))"
            " AND roleid = to_regrole(quote_ident(:group))"
        ),
        {"role": role, "group": TENANTS_GROUP_ROLE},
    ).first()
    if joined:
        return []
    connection.execute(text(f'GRANT "{TENANTS_GROUP_ROLE}" TO "{role}"'))
    return [f"granted role {TENANTS_GROUP_ROLE} to {role}"]


def _adopt(connection: Connection, schema: str) -> list[str]:
    objects = connection.execute(
        text(
            """
            WITH owner AS (SELECT to_regrole(quote_ident(:owner)) AS oid),
            space AS (SELECT oid, nspname, nspowner FROM pg_namespace WHERE nspname = :schema),
            -- The schema's objects through their dependency on it (an index lookup), not by
            -- scanning catalogs that hold every tenant's objects.
            member AS (SELECT d.classid, d.objid FROM pg_depend d, space
                        WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = space.oid)
            SELECT 'SCHEMA', quote_ident(nspname) FROM space
             WHERE nspowner <> (SELECT oid FROM owner)
            UNION ALL
            SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                  WHEN 'm' THEN 'MATERIALIZED VIEW'
                                  WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
                   format('%I.%I', space.nspname, c.relname)
              FROM member JOIN pg_class c ON c.oid = member.objid, space
             WHERE member.classid = 'pg_class'::regclass
               AND c.relowner <> (SELECT oid FROM owner)
               AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
               -- a sequence a column owns changes owner with its table
               AND NOT (c.relkind = 'S' AND EXISTS (
                   SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                      AND d.objid = c.oid AND d.deptype IN ('a', 'i')))
            UNION ALL
            SELECT 'TYPE', format('%I.%I', space.nspname, t.typname)
              FROM member JOIN pg_type t ON t.oid = member.objid, space
             WHERE member.classid = 'pg_type'::regclass
               AND t.typowner <> (SELECT oid FROM owner) AND t.typtype IN ('e', 'd', 'r')
            UNION ALL
            SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
                   format('%I.%I(%s)', space.nspname, p.proname,
                          pg_get_function_identity_arguments(p.oid))
              FROM member JOIN pg_proc p ON p.oid = member.objid, space
             WHERE member.classid = 'pg_proc'::regclass
               AND p.proowner <> (SELECT oid FROM owner) AND p.prokind IN ('f', 'p')
            """
        ),
        {"owner": TENANT_OWNER_ROLE, "schema": schema},
    ).all()
    for kind, name in objects:
        connection.execute(text(f'ALTER {kind} {name} OWNER TO "{TENANT_OWNER_ROLE}"'))
    return [f"gave {kind.lower()} {name} to {TENANT_OWNER_ROLE}" for kind, name in objects]


# Each privilege a role other than the owner holds on the schema and on each of its relations:
# a row a privilege, or one without a grantee for an object on which none is held.
_GRANTS_HELD = text(
    """
    SELECT 'SCHEMA', 's', quote_ident(n.nspname), '', grantee, privilege
      FROM pg_namespace n
      LEFT JOIN LATERAL (
          SELECT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
                     AS grantee, a.privilege_type AS privilege
            FROM aclexplode(n.nspacl) a
           WHERE a.grantee <> n.nspowner) acl ON true
     WHERE n.nspname = :schema
    UNION ALL
    SELECT 'RELATION', c.relkind::text, format('%I.%I', n.nspname, c.relname), c.relname,
           grantee, privilege
      -- The schema's relations through their dependency on it (an index lookup), not by
      -- scanning pg_class, which holds every tenant's.
      FROM pg_namespace n
      JOIN pg_depend d ON d.refclassid = 'pg_namespace'::regclass AND d.refobjid = n.oid
                      AND d.classid = 'pg_class'::regclass
      JOIN pg_class c ON c.oid = d.objid
      LEFT JOIN LATERAL (
          SELECT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
                     AS grantee, a.privilege_type AS privilege
            FROM aclexplode(c.relacl) a
           WHERE a.grantee <> c.relowner) acl ON true
     WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
    """
)


def repair_grants(connection: Connection, schema: str) -> list[str]:
    """Makes the schema's grants exactly these: its tenant role may use the schema and read and
    write its tables; no other role (PUBLIC included) holds any privilege on them. Runs as the
    owner; returns what it changed."""
    role = tenant_role(schema)
    held, expected = _held_and_expected(connection.execute(_GRANTS_HELD, {"schema": schema}))
    changes = []
    for target, privileges in expected.items():
        wanted = {(role, privilege) for privilege in privileges}
        if held[target] == wanted:
            continue
        keyword, name = target
        for grantee in sorted({grantee for grantee, _ in held[target]}):
            quoted = grantee if grantee == "PUBLIC" else f'"{grantee}"'
            connection.execute(text(f"REVOKE ALL ON {keyword} {name} FROM {quoted}"))
        if privileges:
            connection.execute(
                text(f'GRANT {", ".join(sorted(privileges))} ON {keyword} {name} TO "{role}"')
            )
        changes.append(f"reset the grants on {keyword.lower()} {name}")
    return changes


_Target = tuple[str, str]


# (kind, relkind, name, bare name, grantee, privilege): _GRANTS_HELD's rows.
_Granted = Row[str, str, str, str, str | None, str | None]


def _held_and_expected(
    granted: Iterable[_Granted],
) -> tuple[dict[_Target, set[tuple[str, str]]], dict[_Target, frozenset[str]]]:
    """The (grantee, privilege) pairs each object's grants hold, and the privileges its tenant
    role should hold, by (keyword, name): ``("SCHEMA", name)``, ``("TABLE", name)``..."""
    held: dict[_Target, set[tuple[str, str]]] = {}
    expected: dict[_Target, frozenset[str]] = {}
    for kind, relkind, name, bare_name, grantee, privilege in granted:
        if kind == "SCHEMA":
            target, privileges = ("SCHEMA", name), _SCHEMA_PRIVILEGES
        else:
            keyword, privileges = _PRIVILEGES_BY_RELATION_KIND[relkind]
            target = (keyword, name)
            if bare_name == MIGRATION_TABLE:
                privileges = frozenset()
        expected[target] = privileges
        grants = held.setdefault(target, set())
        if grantee is not None and privilege is not None:  # both, or neither
            grants.add((grantee, privilege))
    return held, expected


def inheriting_login_role(connection: Connection) -> str | None:
    """The login role's name if it holds the privileges of the tenant roles it is a member of
    (a login role with INHERIT on PostgreSQL 15): then it can read every tenant's schema outside
    a unit of work, and isolation rests on the application again. None when it does not, and
    for a superuser, which bypasses every privilege anyway (docs/security.md)."""
    row = connection.execute(
        text(
            "SELECT rolname FROM pg_roles WHERE rolname = session_user AND rolinherit"
            " AND NOT rolsuper AND current_setting('server_version_num')::int < 160000"
        )
    ).first()
    return None if row is None else str(row[0])
