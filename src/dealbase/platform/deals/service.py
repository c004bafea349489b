from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from dealbase.db.faults import Fault, faults_meaning
from dealbase.db.statements import Record
from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.errors import Conflict, ExternalIdTaken, FieldError, Invalid, NotFound, ValueTaken
from dealbase.platform import records
from dealbase.platform.activities import repository as activities_repository
from dealbase.platform.customers import repository as customers_repository
from dealbase.platform.customers import service as customers_service
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.deals import creation, repository
from dealbase.platform.deals.models import (
    CustomerLink,
    Deal,
    DealCreate,
    DealFilter,
    DealPatch,
    DealUpsert,
)
from dealbase.platform.events import service as events
from dealbase.platform.pagination import PageRequest
from dealbase.platform.record_writes import OneByOne
from dealbase.platform.resources import CUSTOMER, DEAL, deal_json
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.validation import department_of

# A deal's descriptor, or the same fitted to a tenant's custom fields (``RECORD.fitted``).
DealRecord = records.SyncedRecord[Deal, DealCreate | DealUpsert, DealFilter]


@contextmanager
def _steps_to_start_in() -> Iterator[None]:
    """A deal inserted in its department's first step where there is none (its insert finds
    the step itself): 409, not a database error. The transaction is then unusable, as after any
    failed statement; the unit of work rolls it back (or a batch, to its savepoint). A unique
    custom field's value another deal has is 409 too."""
    with faults_meaning(_no_steps_or_value_taken):
        yield


def _no_steps_or_value_taken(fault: Fault) -> Conflict | None:
    taken = RECORD.rows.unique_value_meaning(fault)
    return taken if isinstance(taken, ValueTaken) else _no_steps_meant(fault)


def _no_steps_meant(fault: Fault) -> Conflict | None:
    return _no_steps() if fault.kind == "not_null" and fault.column == "step_id" else None


def _no_steps() -> Conflict:
    return Conflict("The department has no pipeline steps, so a deal has nowhere to start.")


def _taken(external_id: str | None) -> ExternalIdTaken:
    return ExternalIdTaken(
        f"Another deal of the department has the external id {external_id!r}; to change that"
        " deal, upsert it by its external id."
    )


def create(uow: UnitOfWork, fields: DealCreate) -> Deal:
    """The deal starts unassigned in its department's first step, with one new customer per
    element of ``customers``, linked in request order, each with the values of the tenant's
    custom fields it gives (the deal's and the customers', judged by their fields). An external
    id (the deal's or a customer's) that another record of its kind in the department has is
    ExternalIdTaken."""
    record = RECORD.fitted(uow)
    inserted = _insert(uow, record, fields, as_json=False)
    # Sent now: a failure is raised here.
    deal = creation.created(inserted, uow.scope.tenant_id, _with_values(record))
    # Once written: a batch's operation that failed is rolled back to its savepoint.
    events.recorded_by_statement(uow, lambda: creation.created_wakes(inserted))
    return deal


def create_later_as_json(
    uow: UnitOfWork, fields: DealCreate
) -> AfterCommit[tuple[uuid.UUID, int, str]]:
    """``create``'s deal as its id, its version and the JSON text ``resources.deal_json``
    would make (with the tenant's custom fields, the fitted record's), made by PostgreSQL
    (REST's answer), from one statement sent with the unit of work's next round trip: with the
    COMMIT, when nothing else runs (on a distributed schema, after a round trip that reads the
    department's first step). Its failures are raised by that round trip."""
    inserted = _insert(uow, RECORD.fitted(uow), fields, as_json=True)
    events.recorded_by_statement(uow, lambda: creation.created_wakes(inserted))
    return AfterCommit(lambda: creation.created_as_json(inserted))


def _insert(
    uow: UnitOfWork, record: DealRecord, fields: DealCreate, *, as_json: bool
) -> creation.Created:
    """The deal, its customers, their links and their events: one statement
    (``creation.defer_create``); on a distributed schema, after a round trip that reads the
    department's first step, statements Citus routes whole. ``record``: fitted to the tenant's
    custom fields."""
    scope = uow.scope

    def meaning(fault: Fault) -> Exception | None:
        return _create_failure(fault, fields.external_id)

    return creation.defer_create(
        uow.connection,
        scope.tenant_id,
        department_of(scope),
        fields,
        meaning,
        as_json=as_json,
        fitted=_custom_values(record, customers_service.RECORD.fitted(uow), fields),
    )


def _custom_values(
    record: DealRecord,
    customer: records.SyncedRecord[Customer, CustomerFields, CustomerFilter],
    fields: DealCreate,
) -> creation.Fitted:
    """The values of the tenant's custom fields a create gives (``record`` and ``customer``
    are fitted to them), judged: else Invalid, naming every bad field, a customer's within its
    place in ``customers``."""
    if (
        record.shape is DEAL
        and customer.shape is CUSTOMER
        and fields.custom_fields is None
        and all(each.custom_fields is None for each in fields.customers)
    ):
        return creation.PLAIN  # no field of either, nor any value given
    errors: list[FieldError] = []
    deal_values: dict[str, object] = {}
    try:
        deal_values = record.created_columns(fields)
    except Invalid as exc:
        errors += exc.errors
    customer_values = []
    for index, each in enumerate(fields.customers):
        try:
            customer_values.append(customer.created_columns(each))
        except Invalid as exc:
            errors += exc.within(f"customers[{index}]").errors
    if errors:
        named = ", ".join(sorted({error.field for error in errors}))
        raise Invalid(f"The request has invalid fields: {named}.", errors)
    return creation.Fitted(record.shape, customer.shape, deal_values, customer_values)


def _with_values(record: DealRecord) -> Callable[[Deal, Record], Deal]:
    """A deal read from a write's row as the record fitted to the tenant's custom fields reads
    it: with their values, the row's."""
    custom = record.custom
    if custom is None or not custom.fields:
        return _as_written
    with_values: Callable[[Deal, Record], Deal] = custom.with_values_of_row
    return with_values


def _as_written(deal: Deal, row: Record) -> Deal:
    return deal


def _create_failure(fault: Fault, external_id: str | None) -> Exception | None:
    """What a failure of a create's statement means: an external id taken (the deal's, else a
    customer's), a unique custom field's value taken (the deal's or a customer's), or a
    department without steps for the deal to start in. A unique violation is told by its
    constraint: Citus passes a worker's on without the table's name."""
    if fault.kind == "unique":
        if fault.constraint == "deals_external_id_key":
            return _taken(external_id)
        if fault.constraint == "customers_external_id_key":
            return customers_repository.external_id_taken()
        taken = RECORD.rows.unique_value_meaning(
            fault
        ) or customers_repository.rows.unique_value_meaning(fault)
        if isinstance(taken, ValueTaken):
            return taken
    return _no_steps_meant(fault)


def _read(uow: UnitOfWork, deal_id: uuid.UUID) -> Deal | None:
    # The deal's row travels with its customers' statement: one round trip for both.
    reading = repository.defer_deal_row(uow.connection, uow.scope.department_id, deal_id)
    customers = customers_repository.customers_of_deals(
        uow.connection, uow.scope.tenant_id, [deal_id]
    )
    row = reading.rows().mappings().first()
    return None if row is None else repository.to_deal(row, customers[deal_id])


def _with_customers(uow: UnitOfWork, rows: Sequence[Record]) -> list[Deal]:
    customers = customers_repository.customers_of_deals(
        uow.connection, uow.scope.tenant_id, list({row["id"] for row in rows})
    )
    return [repository.to_deal(row, customers[row["id"]]) for row in rows]


def _by_ids(uow: UnitOfWork, deal_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Deal]:
    rows = repository.deal_rows_by_ids(uow.connection, uow.scope.department_id, deal_ids)
    return {deal.id: deal for deal in _with_customers(uow, rows)}


def _page(
    uow: UnitOfWork, filters: DealFilter, page: PageRequest, narrowed: records.Completed
) -> list[Deal]:
    """A page of deals with their customers: two statements whatever the page size."""
    scope, connection = uow.scope, uow.connection
    rows = repository.list_deal_rows(connection, scope.department_id, filters, page, narrowed)
    customers = customers_repository.customers_of_deals(
        connection, scope.tenant_id, [row["id"] for row in rows[: page.limit]]
    )
    return [repository.to_deal(row, customers.get(row["id"], [])) for row in rows]


def _sort_of(filters: DealFilter) -> Callable[[Deal], int] | None:
    return _sorted_volume if filters.order_by.startswith("volume") else None


def _sorted_volume(deal: Deal) -> int:
    # As the volume orders sort it: a deal without one sorts as the smallest.
    return -1 if deal.volume is None else deal.volume


RECORD: DealRecord = records.SyncedRecord(
    noun="deal",
    # Read again, with its customers and its employee's name.
    to_model=lambda uow, row: RECORD.get(uow, row["id"]),
    read=_read,
    lists=records.Listing(
        models=_page,
        texts=lambda uow, filters, page, completed: repository.list_deals_as_json(
            uow.connection, uow.scope.tenant_id, uow.scope.department_id, filters, page, completed
        ),
        filtering=repository.DEAL_FILTERS,
        sort_of=_sort_of,
    ),
    shape=DEAL,
    create_model=DealCreate,
    upsert_model=DealUpsert,
    patch_model=DealPatch,
    writes=OneByOne(
        insert=lambda uow, department_id, fields: (
            create(uow, fields)
            if isinstance(fields, DealCreate)
            else _insert_upserted(uow, department_id, fields)
        ),
        models=_with_customers,
    ),
    read_columns=(repository.EMPLOYEE_NAME,),
    references=repository.REFERENCES,
    field_events=(("step_id", "deal.step_changed"), ("employee_id", "deal.assigned")),
    # Before the foreign key's SET NULL would do it silently; a refused delete rolls this back.
    before_delete=lambda uow, deal_id: activities_repository.detach_from_deal(
        uow.connection, deal_id
    ),
    # As it was, for its event: with its customers and its employee's name.
    deleted_as=lambda uow, deal_id: RECORD.get(uow, deal_id),
    # Many in two statements: their rows, and their customers for all of them.
    read_many=_by_ids,
)


def link_customer(uow: UnitOfWork, deal_id: uuid.UUID, link: CustomerLink) -> Deal:
    """Appends an existing customer of the deal's department; linking it again changes nothing."""
    connection = uow.connection
    before = RECORD.get(uow, deal_id)
    customer = customers_repository.get_customer(
        connection, uow.scope.tenant_id, before.department_id, link.customer_id
    )
    if customer is None:
        raise Invalid.unknown_references(["customer_id"], "the deal's department")
    if not repository.link_customer(connection, deal_id, link.customer_id):
        return before
    return _customers_changed(uow, before)


def unlink_customer(uow: UnitOfWork, deal_id: uuid.UUID, customer_id: uuid.UUID) -> None:
    before = RECORD.get(uow, deal_id)
    if not repository.unlink_customer(uow.connection, deal_id, customer_id):
        raise NotFound(f"The customer {customer_id} is not linked to the deal {deal_id}.")
    _customers_changed(uow, before)


def _customers_changed(uow: UnitOfWork, before: Deal) -> Deal:
    """A new version of the deal, whose customers changed, and its deal.updated event (with the
    customers as they were)."""
    repository.new_version(uow.connection, before.department_id, before.id)
    after = RECORD.get(uow, before.id)
    previous = {"customers": deal_json(before)["customers"]}
    shown = RECORD.fitted(uow).as_json(after)
    events.record(uow, "deal.updated", after.department_id, shown, ("customers",), previous)
    return after


def first_of_steps(
    uow: UnitOfWork, step_ids: Sequence[uuid.UUID], per_step: int
) -> dict[uuid.UUID, list[Deal]]:
    """The first deals of each step (of the caller's department, or any for a tenant-wide
    caller) with their customers, in two statements for all steps."""
    rows = repository.first_deal_rows_of_steps(
        uow.connection, uow.scope.department_id, step_ids, per_step
    )
    return _by_parent(uow, rows, step_ids)


def first_of_customers(
    uow: UnitOfWork, customer_ids: Sequence[uuid.UUID], per_customer: int
) -> dict[uuid.UUID, list[Deal]]:
    """The first deals each customer is linked to, in two statements for all customers."""
    rows = repository.first_deal_rows_of_customers(
        uow.connection, uow.scope.department_id, customer_ids, per_customer
    )
    return _by_parent(uow, rows, customer_ids)


def _by_parent(
    uow: UnitOfWork, rows: Sequence[Record], parent_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Deal]]:
    """Each parent's deals of ``rows`` (whose ``parent_id`` names it), with their customers."""
    found: dict[uuid.UUID, list[Deal]] = {parent_id: [] for parent_id in parent_ids}
    for row, deal in zip(rows, _with_customers(uow, rows), strict=True):
        found[row["parent_id"]].append(deal)
    return found


def _insert_upserted(uow: UnitOfWork, department_id: uuid.UUID, fields: DealUpsert) -> Deal | None:
    """The upserted deal, new (deal.created), with the values of the tenant's custom fields
    ``fields`` gives (the fitted upsert model's, whose dump names their columns); None when
    another transaction has just inserted its external id."""
    connection = uow.connection
    record = RECORD.fitted(uow)
    values = fields.model_dump()
    values.pop(CUSTOM_FIELDS, None)  # the record's own model's: none given
    RECORD.check_references(uow, department_id, values)
    step_id = values.pop("step_id")
    with _steps_to_start_in():
        row = repository.insert_deal(connection, department_id, step_id, values, record.shape.table)
    if row is None:
        return None
    inserted = row
    if fields.employee_id is not None:  # read again, with the employee's name
        row = repository.get_deal_row(connection, department_id, row["id"])
        assert row is not None, "the deal was just inserted"
    deal = _with_values(record)(repository.to_deal(row, ()), inserted)
    events.record(uow, "deal.created", department_id, record.as_json(deal))
    return deal
