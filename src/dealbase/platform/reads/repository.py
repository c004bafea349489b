"""A read tree (``models``) as one SQL statement that builds the answer's JSON.

Objects are ``row_to_json`` of a row of their entries when every key is one of the schema's
names (``SchemaKey``), else ``json_build_object`` of their entries; to-many relations, and a
page's edges, ``ARRAY`` of a correlated subquery in the relation's order; a page a CTE of its rows (in the
list's keyset order, one more than asked for) that the edges, the page's info and the count read
from. Every other key is a bound value, and so is every value a request gives: the text depends
only on the tree's shape, on which filters apply and, where it shows a record's custom fields,
on their names and types in the caller's tenant, and is built once for each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    Integer,
    LargeBinary,
    Select,
    Table,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal,
    null,
    select,
)
from sqlalchemy.dialects.postgresql import JSON, UUID
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, FromClause

from dealbase.db.statements import built_once
from dealbase.platform.activities.repository import ACTIVITY_FILTERS
from dealbase.platform.customers.repository import CUSTOMER_FILTERS
from dealbase.platform.deals.repository import DEAL_FILTERS, deal_order
from dealbase.platform.listing import BY_ID, KeysetOrder, ListFilters, Shape
from dealbase.platform.pipeline.repository import (
    employee_summaries,
    step_summaries,
    summary_period,
    volume_in,
)
from dealbase.platform.reads.models import (
    Attribute,
    Constant,
    Cursor,
    CustomFields,
    Edges,
    EndCursor,
    Entry,
    Fields,
    Form,
    HasNextPage,
    OneRead,
    PageInfo,
    PageRead,
    Related,
    RelatedList,
    SchemaKey,
    TotalCount,
)
from dealbase.platform.resources import CUSTOMER, DEAL
from dealbase.platform.shapes import CUSTOM_FIELDS, row_json
from dealbase.platform.shapes import Shape as JsonShape
from dealbase.platform.tables import (
    activities,
    customers,
    deal_customers,
    deals,
    departments,
    employees,
    steps,
)

Row = FromClause
# The entries one object may have: json_build_object takes at most 100 arguments, two an entry.
MAX_ENTRIES = 50
Derived = Callable[[Row], ColumnElement[Any]]
# The custom fields of each kind of record a statement shows (``CustomFields``), as the
# caller's tenant has them: each field by its name over the record's table with their columns,
# as its JSON's ``custom_fields`` shows them; None (or no key) for a tenant without any.
CustomShapes = Mapping[str, JsonShape | None]
# The kinds of record that have custom fields.
CUSTOM_KINDS = frozenset({"customer", "deal", "activity"})


def _deals_in_step(row: Row, figure: Callable[[Row], ColumnElement[Any]]) -> ColumnElement[Any]:
    deal = deals.alias()
    return select(figure(deal)).where(deal.c.step_id == row.c.id).correlate(row).scalar_subquery()


# Each kind of object: its table (a pipeline is its department's row, each of its steps a
# step's row), and the values it shows that no column holds.
_TABLES: Mapping[str, Table] = {
    "customer": customers,
    "deal": deals,
    "activity": activities,
    "step": steps,
    "employee": employees,
    "department": departments,
    "pipeline": departments,
    "pipeline_step": steps,
}
_DERIVED: Mapping[str, Mapping[str, Derived]] = {
    # As their JSON shapes make them (the tenant's id, which the caller's scope holds; a deal's
    # employee's name).
    "customer": CUSTOMER.derived,
    "deal": DEAL.derived,
    # The deals now in the step, summed by PostgreSQL (``pipeline.board``'s figures).
    "pipeline_step": {
        "deal_count": lambda row: _deals_in_step(row, lambda deal: func.count(deal.c.id)),
        "total_volume": lambda row: _deals_in_step(
            row, lambda deal: func.coalesce(func.sum(deal.c.volume), 0)
        ),
    },
}


def _summed(figure: Callable[[Row, Row], ColumnElement[Any]]) -> Derived:
    """A summary's total over its deals (in the caller's department) and their steps."""

    def total(_: Row) -> ColumnElement[Any]:
        deal, step = deals.alias(), steps.alias()
        return (
            select(figure(deal, step))
            .select_from(deal.join(step, step.c.id == deal.c.step_id))
            .where(summary_period(deal), _caller_department_is(deal.c.department_id))
            .scalar_subquery()
        )

    return total


def _volume_in(kind: str) -> Callable[[Row, Row], ColumnElement[Any]]:
    return lambda deal, step: volume_in(kind, deal, step)


# Kinds whose rows a grouping makes (no table): the rows, and the values they show.
# The groupings are ``pipeline.summary``'s own (``platform.pipeline.repository``), of the
# caller's department.
_GROUPED: Mapping[str, tuple[Callable[[], Select[Any]], frozenset[str]]] = {
    "step_summary": (
        lambda: step_summaries(_caller_department_is),
        frozenset({"id", "deal_count", "volume"}),
    ),
    "employee_summary": (
        lambda: employee_summaries(_caller_department_is),
        frozenset({"id", "deal_count", "volume", "won_volume", "lost_volume"}),
    ),
}
# A summary has no row: its values are the period's (bound as text, written by the caller as
# the resolvers show the period: ``summary_from_text``, ``summary_to_text``) and its totals.
_SUMMARY_WRITTEN = frozenset({"created_from", "created_to"})
_SUMMARY_DERIVED: Mapping[str, Derived] = {
    "created_from": lambda _: bindparam("summary_from_text", type_=Text),
    "created_to": lambda _: bindparam("summary_to_text", type_=Text),
    "deal_count": _summed(lambda deal, _: func.count(deal.c.id)),
    "volume": _summed(lambda deal, _: func.coalesce(func.sum(deal.c.volume), 0)),
    "won_volume": _summed(_volume_in("won")),
    "lost_volume": _summed(_volume_in("lost")),
}


def _department_of(kind: str, row: Row) -> ColumnElement[Any]:
    """The department a row of ``kind`` belongs to (a department's is its id)."""
    return row.c.id if _TABLES[kind] is departments else row.c.department_id


@dataclass(frozen=True)
class _Relation:
    """Rows of ``kind`` that a parent row names. To one (``reference``): the row whose id the
    parent's column holds (``id``: the parent's row itself, as another kind). To many: the rows
    whose ``parent_column`` holds the parent's id, in ``order``; or linked to it by
    ``deal_customers`` (a deal's customers in link order, a customer's deals oldest first)."""

    kind: str
    many: bool = False
    reference: str = ""
    parent_column: str = ""
    order: str = "id"
    through_links: bool = False
    # Whether a department caller sees only its department's rows (a deal's customers are of
    # the deal's department already).
    in_department: bool = True


_RELATIONS: Mapping[tuple[str, str], _Relation] = {
    ("deal", "step"): _Relation("step", reference="step_id"),
    ("deal", "employee"): _Relation("employee", reference="employee_id"),
    ("activity", "customer"): _Relation("customer", reference="customer_id"),
    ("activity", "deal"): _Relation("deal", reference="deal_id"),
    ("activity", "employee"): _Relation("employee", reference="employee_id"),
    ("deal", "customers"): _Relation(
        "customer", many=True, through_links=True, in_department=False
    ),
    ("deal", "activities"): _Relation("activity", many=True, parent_column="deal_id"),
    ("customer", "deals"): _Relation("deal", many=True, through_links=True),
    ("customer", "activities"): _Relation("activity", many=True, parent_column="customer_id"),
    ("department", "steps"): _Relation(
        "step", many=True, parent_column="department_id", order="position"
    ),
    ("pipeline", "department"): _Relation("department", reference="id"),
    ("pipeline", "steps"): _Relation(
        "pipeline_step", many=True, parent_column="department_id", order="position"
    ),
    ("pipeline_step", "step"): _Relation("step", reference="id"),
    ("pipeline_step", "deals"): _Relation("deal", many=True, parent_column="step_id"),
    ("summary", "steps"): _Relation("step_summary", many=True),
    ("summary", "employees"): _Relation("employee_summary", many=True),
    ("step_summary", "step"): _Relation("step", reference="id"),
    ("employee_summary", "employee"): _Relation("employee", reference="id"),
}


def readable(kind: str, name: str) -> bool:
    """Whether an object of ``kind`` shows the value ``name`` (an ``Attribute``)."""
    if kind == "summary":
        return name in _SUMMARY_DERIVED
    if kind in _GROUPED:
        return name in _GROUPED[kind][1]
    return name in _TABLES[kind].c or name in _DERIVED.get(kind, {})


def shows_custom_fields(kind: str, name: str) -> bool:
    """Whether the value ``name`` of an object of ``kind`` is its record's custom fields (a
    ``CustomFields``)."""
    return name == CUSTOM_FIELDS and kind in CUSTOM_KINDS


def relation(kind: str, name: str) -> tuple[str, bool] | None:
    """The kind of object the relation ``name`` of ``kind`` reads, and whether it is a list."""
    found = _RELATIONS.get((kind, name))
    return None if found is None else (found.kind, found.many)


def _formatted(value: ColumnElement[Any], form: Form) -> ColumnElement[Any]:
    if form is Form.TEXT:
        return cast(value, Text)
    if form is Form.DATE:
        return func.to_char(value, "YYYY-MM-DD")
    if form is Form.NAME:
        return func.upper(value)
    if form is Form.TIMESTAMP:
        # Python's isoformat: microseconds only when there are some, then the UTC offset.
        whole = func.date_trunc("second", value) == value
        return (
            func.to_char(value, 'YYYY-MM-DD"T"HH24:MI:SS')
            + case((whole, ""), else_=func.to_char(value, ".US"))
            + func.to_char(value, "TZH:TZM")
        )
    return value


@dataclass
class _Builder:
    """Builds one statement; numbers the aliases it makes."""

    aliases: Iterator[int] = field(default_factory=lambda: iter(range(1_000_000)))
    custom: CustomShapes = field(default_factory=dict)

    def alias(self, kind: str) -> Row:
        return _TABLES[kind].alias(f"r{next(self.aliases)}")

    @staticmethod
    def key(name: str) -> ColumnElement[Any]:
        # A key comes from the request (an alias): a bound value, never SQL text.
        return literal(name, Text)

    def json_object(self, pairs: list[ColumnElement[Any]]) -> ColumnElement[Any]:
        return func.json_build_object(*pairs)

    def object(self, kind: str, row: Row, fields: Fields) -> ColumnElement[Any]:
        return self.object_of(row, [(key, self.entry(kind, row, entry)) for key, entry in fields])

    def object_of(
        self, row: Row, entries: list[tuple[str, ColumnElement[Any]]]
    ) -> ColumnElement[Any]:
        """The object of ``entries``' keys and values, computed from ``row``."""
        if entries and all(isinstance(key, SchemaKey) for key, _ in entries):
            # The schema's names as labels: row_to_json costs PostgreSQL less than
            # json_build_object, which looks up each argument's type at every call.
            return row_json(row, entries)
        pairs: list[ColumnElement[Any]] = []
        for key, value in entries:
            pairs += (self.key(key), value)
        return self.json_object(pairs)

    def entry(self, kind: str, row: Row, entry: Entry) -> ColumnElement[Any]:
        if isinstance(entry, Attribute):
            if kind == "summary":
                value = _SUMMARY_DERIVED[entry.name](row)
                # The period's ends come written as the caller shows them.
                return value if entry.name in _SUMMARY_WRITTEN else _formatted(value, entry.form)
            derived = _DERIVED.get(kind, {}).get(entry.name)
            value = derived(row) if derived is not None else row.c[entry.name]
            return _formatted(value, entry.form)
        if isinstance(entry, Constant):
            return literal(entry.value, Text)
        if isinstance(entry, Related):
            return self.related(kind, row, entry)
        if isinstance(entry, CustomFields):
            return self.custom_fields(kind, row)
        return self.related_list(kind, row, entry)

    def custom_fields(self, kind: str, row: Row) -> ColumnElement[Any]:
        """The record's custom fields as its JSON shows them, read from its own row of the
        table with their columns by its id (the row here may be a page's, whose columns are
        the table's as every tenant has it); null for a tenant without any."""
        shape = self.custom.get(kind)
        if shape is None:
            return cast(null(), JSON)
        values = shape.table.alias(f"c{next(self.aliases)}")
        return (
            select(shape.json_of_row(values))
            .where(values.c.id == row.c.id)
            .correlate(row)
            .scalar_subquery()
        )

    def related(self, kind: str, parent: Row, entry: Related) -> ColumnElement[Any]:
        found = _RELATIONS[(kind, entry.relation)]
        child = self.alias(found.kind)
        query = (
            select(self.object(found.kind, child, entry.fields))
            .where(child.c.id == parent.c[found.reference])
            .correlate(parent)
        )
        if found.in_department:
            query = query.where(_caller_department_is(_department_of(found.kind, child)))
        return query.scalar_subquery()

    def related_list(self, kind: str, parent: Row, entry: RelatedList) -> ColumnElement[Any]:
        found = _RELATIONS[(kind, entry.relation)]
        if found.kind in _GROUPED:
            return self.grouped(found.kind, entry.fields)
        links = deal_customers.alias(f"l{next(self.aliases)}")
        if found.through_links and found.kind == "customer":
            return self.linked_customers(parent, links, entry.fields)
        limit = None if entry.limit is None else bindparam(entry.limit, type_=Integer)
        if found.through_links:
            return self.linked_deals(found, parent, links, entry.fields, limit)
        return self.children(found, parent, entry.fields, limit)

    def grouped(self, kind: str, fields: Fields) -> ColumnElement[Any]:
        """The rows of a kind made by grouping (a summary's steps), in their order."""
        rows = _GROUPED[kind][0]().subquery(f"r{next(self.aliases)}")
        return _json_array(
            select(self.object(kind, rows, fields)).select_from(rows).order_by(rows.c.ordinal)
        )

    def linked_customers(self, parent: Row, links: Row, fields: Fields) -> ColumnElement[Any]:
        """A deal's customers, in link order."""
        # Each link's customer by its key: a deal has a few, whatever the statistics say.
        child = self.alias("customer")
        item = (
            select(self.object("customer", child, fields))
            .where(child.c.id == links.c.customer_id)
            .scalar_subquery()
        )
        return _json_array(
            select(item)
            .where(links.c.deal_id == parent.c.id)
            .order_by(links.c.position)
            .correlate(parent)
        )

    def linked_deals(
        self,
        found: _Relation,
        parent: Row,
        links: Row,
        fields: Fields,
        limit: ColumnElement[Any] | None,
    ) -> ColumnElement[Any]:
        """A customer's deals, oldest first."""
        # Its links (few) in deal order, each joined to its deal by the deal's key, which the
        # department's check and the JSON then read once.
        deal = self.alias("deal")
        linked = (
            select(self.object("deal", deal, fields))
            .join_from(links, deal, deal.c.id == links.c.deal_id)
            .where(links.c.customer_id == parent.c.id)
        )
        if found.in_department:
            linked = linked.where(_caller_department_is(deal.c.department_id))
        return _json_array(linked.order_by(links.c.deal_id).limit(limit).correlate(parent))

    def children(
        self, found: _Relation, parent: Row, fields: Fields, limit: ColumnElement[Any] | None
    ) -> ColumnElement[Any]:
        """The rows whose ``parent_column`` names the parent, in the relation's order."""
        table = _TABLES[found.kind]
        # Found by the parent's index (OFFSET 0 keeps the planner from walking the
        # department's index in order instead), then the first.
        candidates = select(*table.c).where(table.c[found.parent_column] == parent.c.id)
        if found.in_department:
            candidates = candidates.where(_caller_department_is(table.c.department_id))
        child = candidates.offset(0).correlate(parent).subquery(f"r{next(self.aliases)}")
        return _json_array(
            select(self.object(found.kind, child, fields))
            .select_from(child)
            .order_by(child.c[found.order], child.c.id)
            .limit(limit)
        )


def _json_array(items: Select[Any]) -> ColumnElement[Any]:
    """The JSON array of ``items``' one column, in their order: ``ARRAY`` of the ordered rows,
    which costs PostgreSQL less than ``json_agg`` with an ``ORDER BY`` of its own over them;
    no rows, ``[]``."""
    return func.array_to_json(func.array(items.scalar_subquery()))


def _caller_department_is(department: ColumnElement[Any]) -> ColumnElement[bool]:
    """``department`` is the caller's (``caller_department_id``), for a department caller; a
    tenant-wide caller's reads give none and see every department's rows."""
    caller = bindparam("caller_department_id", type_=UUID(as_uuid=True))
    return caller.is_(None) | (department == caller)


@dataclass(frozen=True)
class _Listed:
    kind: str
    filters: ListFilters
    order: Callable[[Any], KeysetOrder]  # of the list's filter model


_LISTS: Mapping[str, _Listed] = {
    "customers": _Listed("customer", CUSTOMER_FILTERS, lambda _: BY_ID),
    "deals": _Listed("deal", DEAL_FILTERS, lambda filters: deal_order(filters.order_by)),
    "activities": _Listed("activity", ACTIVITY_FILTERS, lambda _: BY_ID),
}
_ONES = {"customer", "deal", "activity", "pipeline", "summary"}


def listed_kind(resource: str) -> str | None:
    """The kind of a list's rows (``deals``: ``deal``), or None for no list of that name."""
    found = _LISTS.get(resource)
    return None if found is None else found.kind


def one_kind(resource: str) -> str | None:
    return resource if resource in _ONES else None


def list_filters(resource: str) -> ListFilters:
    return _LISTS[resource].filters


def list_order(resource: str, filters: BaseModel) -> KeysetOrder:
    return _LISTS[resource].order(filters)


def page_statement(
    read: PageRead,
    shape: Shape,
    order: KeysetOrder,
    after: bool,
    custom: CustomShapes,
    narrowing: tuple[ColumnElement[bool], ...] = (),
) -> Select[Any]:
    """The statement of a page: one row, the connection's JSON text. ``custom``: the custom
    fields of the kinds its tree shows them of (``custom_kinds``). ``narrowing``: conditions
    on the list's table besides its filters' (a tenant's custom filters), on its rows and its
    count."""
    listed = _LISTS[read.resource]
    table = listed.filters.table
    conditions = (*listed.filters.conditions(shape), *narrowing)
    builder = _Builder(custom=custom)
    query = select(
        *table.c, func.row_number().over(order_by=order.order_by(table)).label("ordinal")
    ).where(*conditions)
    if after:
        query = query.where(order.after(table))
    page: CTE = (
        query.order_by(*order.order_by(table))
        .limit(bindparam("row_limit", type_=Integer))
        .cte("page")
    )
    in_page = page.c.ordinal <= bindparam("page_limit", type_=Integer)
    cursor = _cursor(page, order)

    pairs: list[ColumnElement[Any]] = []
    for key, part in read.fields:
        if isinstance(part, Constant):
            value: ColumnElement[Any] = literal(part.value, Text)
        elif isinstance(part, TotalCount):
            value = select(func.count()).select_from(table).where(*conditions).scalar_subquery()
        elif isinstance(part, PageInfo):
            info: list[ColumnElement[Any]] = []
            for info_key, info_part in part.fields:
                info += (builder.key(info_key), _page_info(info_part, page, in_page, cursor))
            value = builder.json_object(info)
        else:
            value = _edges(builder, listed.kind, page, in_page, cursor, part)
        pairs += (builder.key(key), value)
    return built_once(select(cast(builder.json_object(pairs), Text)))


def _page_info(
    part: HasNextPage | EndCursor | Constant,
    page: CTE,
    in_page: ColumnElement[bool],
    cursor: ColumnElement[str],
) -> ColumnElement[Any]:
    if isinstance(part, Constant):
        return literal(part.value, Text)
    if isinstance(part, HasNextPage):
        rows = select(func.count()).select_from(page).scalar_subquery()
        return rows > bindparam("page_limit", type_=Integer)
    return select(cursor).where(in_page).order_by(page.c.ordinal.desc()).limit(1).scalar_subquery()


def _edges(
    builder: _Builder,
    kind: str,
    page: CTE,
    in_page: ColumnElement[bool],
    cursor: ColumnElement[str],
    edges: Edges,
) -> ColumnElement[Any]:
    entries: list[tuple[str, ColumnElement[Any]]] = []
    for key, part in edges.fields:
        if isinstance(part, Constant):
            value: ColumnElement[Any] = literal(part.value, Text)
        elif isinstance(part, Cursor):
            value = cursor
        else:
            value = builder.object(kind, page, part.fields)
        entries.append((key, value))
    return _json_array(
        select(builder.object_of(page, entries))
        .select_from(page)
        .where(in_page)
        .order_by(page.c.ordinal)
    )


def _cursor(row: Row, order: KeysetOrder) -> ColumnElement[str]:
    """``pagination``'s cursor of a row, made by PostgreSQL: the id's 16 bytes, the filters'
    fingerprint (``fingerprint``), the sort value's 8 when the order has one; base64url
    without padding."""
    raw = func.uuid_send(row.c.id).op("||")(bindparam("fingerprint", type_=LargeBinary))
    if order.sort is not None:
        raw = raw.op("||")(func.int8send(order.sort(row)))
    encoded = func.translate(func.encode(raw, "base64"), "+/", "-_")
    return func.rtrim(encoded, "=")


def one_statement(read: OneRead, custom: CustomShapes) -> Select[Any]:
    """The statement of one row by id (``row_id``), if the caller's department holds it
    (``caller_department_id``): its JSON text, or no row. ``custom``: as ``page_statement``'s."""
    builder = _Builder(custom=custom)
    if read.resource == "summary":
        # No row: the period's values and its totals, bound.
        nothing = select(literal(1).label("id")).subquery("r")
        return built_once(select(cast(builder.object("summary", nothing, read.fields), Text)))
    row = builder.alias(read.resource)
    return built_once(
        select(cast(builder.object(read.resource, row, read.fields), Text)).where(
            row.c.id == bindparam("row_id", type_=UUID(as_uuid=True)),
            _caller_department_is(_department_of(read.resource, row)),
        )
    )
