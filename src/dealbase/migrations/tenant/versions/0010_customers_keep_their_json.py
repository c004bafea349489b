"""Each customer keeps the JSON the API shows of it, in a column PostgreSQL computes whenever the
row is written (``api_json``, a stored generated column): REST's reads of customers send it as
it is instead of building it per read.

Building 50 customers' JSON was most of what a page of ``GET /customers`` cost PostgreSQL, and
the largest part of the page's gap to the baseline service. Every write of a customer, by any
route, goes through PostgreSQL's own computation of the column, so no write path can leave it
stale.

``customer_api_json`` is the schema's function that builds it: ``IMMUTABLE`` as a generated
column needs, which it is in fact (the timestamps written in UTC with an explicit format, nothing
read from the session's settings or from other rows). PL/pgSQL, whose plan a session keeps; a
SQL function there is planned at each call, which made every create dearer. Its
JSON is ``resources.customer_json``'s, name for name and in that order, the tenant's id written
in from the schema's name (a tenant schema's name is its tenant's id);
``tests/platform/test_resources.py`` holds the column and ``customer_json`` equal. A later change of the customer's JSON is a migration that replaces the
function and recomputes the column.
"""

from __future__ import annotations

from alembic import op

revision = "t0010"
down_revision = "t0009"

# The customer's text columns, in the order its JSON shows them; the tenant's id goes after the
# external id.
_TEXT = (
    "external_id",
    "last_name",
    "first_name",
    "company",
    "website",
    "title",
    "phone_1",
    "phone_2",
    "phone_3",
    "phone_1_label",
    "phone_2_label",
    "phone_3_label",
    "email",
    "postcode",
    "address",
    "address_addition",
    "city",
    "country",
    "state",
    "contact_origin",
)
_ARGUMENTS = ("id", *_TEXT, "birthday", "note", "created_at", "updated_at")
_TIMESTAMP = '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\''
_TENANT = "TENANT_ID"


def _function() -> str:
    """The function's definition, the tenant's id a placeholder (``_TENANT``)."""
    shown = ", ".join(
        f"{name}, {_TENANT}::text AS tenant_id" if name == "external_id" else name for name in _TEXT
    )
    body = (
        "BEGIN RETURN (SELECT row_to_json(shown) FROM"  # noqa: S608 (names and SQL of ours)
        " (SELECT id::text AS id, "
        f"{shown}, to_char(birthday, 'YYYY-MM-DD') AS birthday, note,"
        f" to_char(created_at AT TIME ZONE 'UTC', {_TIMESTAMP}) AS created_at,"
        f" to_char(updated_at AT TIME ZONE 'UTC', {_TIMESTAMP}) AS updated_at) AS shown); END"
    )
    arguments = ", ".join(
        [
            "id uuid",
            *(f"{name} text" for name in _TEXT),
            "birthday date",
            "note text",
            "created_at timestamptz",
            "updated_at timestamptz",
        ]
    )
    return (
        f"CREATE FUNCTION customer_api_json({arguments}) RETURNS json"
        f" IMMUTABLE PARALLEL SAFE LANGUAGE plpgsql AS $body${body}$body$"
    )


def upgrade() -> None:
    # The runner's search_path names the tenant's schema first: its name, past "t_", is the
    # tenant's id in hex. (Written in by concatenation: a percent sign in this text reaches
    # PostgreSQL doubled, which format() would read as a literal one.)
    before, after = _function().split(_TENANT)
    op.execute(
        f"DO $do$ BEGIN EXECUTE $a${before}$a$"
        " || quote_literal(CAST(CAST(substr(current_schema(), 3) AS uuid) AS text))"
        f" || $b${after}$b$; END $do$"
    )
    # One rewrite of the table, its rows' JSON computed.
    op.execute(
        "ALTER TABLE customers ADD COLUMN api_json json"
        f" GENERATED ALWAYS AS (customer_api_json({', '.join(_ARGUMENTS)})) STORED"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE customers DROP COLUMN api_json")
    op.execute("DROP FUNCTION customer_api_json")
