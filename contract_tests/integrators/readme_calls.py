"""The README's "Try it" calls as a Python integrator writes them, with the client that
openapi-python-client generates from the served document (the package ``dealbase_client``, on
PYTHONPATH). ``mypy --strict`` must accept it; then it runs against a live server and fails on the
first answer that is not the one the README shows.

SERVER_URL, API_KEY and DEPARTMENT_ID come from the environment.
"""

from __future__ import annotations

import os
from http import HTTPStatus
from typing import TypeVar
from uuid import UUID

from dealbase_client import AuthenticatedClient
from dealbase_client.api.customers import (
    create_customer,
    get_customer,
    list_customers,
    update_customer,
)
from dealbase_client.api.deals import create_deal
from dealbase_client.models import (
    CustomerFields,
    CustomerList,
    CustomerOut,
    CustomerPatch,
    DealCreate,
    DealOut,
    Problem,
)
from dealbase_client.types import UNSET, Response, Unset

Parsed = TypeVar("Parsed")


def answer(
    response: Response[Parsed | Problem], status: HTTPStatus, parsed_as: type[Parsed]
) -> Parsed:
    """The body of ``response``, which must have ``status`` and parse as ``parsed_as``."""
    assert response.status_code == status, (response.status_code, response.content)
    assert isinstance(response.parsed, parsed_as), response.content
    return response.parsed


def problem(response: Response[Parsed | Problem], status: HTTPStatus) -> Problem:
    """The problem+json body of ``response``, which must have ``status``."""
    assert response.status_code == status, (response.status_code, response.content)
    assert isinstance(response.parsed, Problem), response.content
    return response.parsed


def main() -> None:
    client = AuthenticatedClient(
        base_url=os.environ["SERVER_URL"],
        token=os.environ["API_KEY"],
        auth_header_name="X-Api-Key",
        prefix="",
        headers={"X-Department-Id": os.environ["DEPARTMENT_ID"]},
    )
    with client:
        # Create a customer.
        created = create_customer.sync_detailed(
            client=client,
            body=CustomerFields(
                last_name="Lovelace", first_name="Ada", email="ada@example.com", city="London"
            ),
        )
        customer = answer(created, HTTPStatus.CREATED, CustomerOut)
        assert (customer.city, customer.company) == ("London", None)
        assert created.headers["etag"] == '"1"'
        assert created.headers["location"] == f"/api/v1/integration/customers/{customer.id}"

        # Create a deal, with two new customers.
        deal = answer(
            create_deal.sync_detailed(
                client=client,
                body=DealCreate(
                    name="Analytical engine, 2 units",
                    volume=250000,
                    deal_origin="trade fair",
                    customers=[
                        CustomerFields(last_name="Lovelace", first_name="Ada"),
                        CustomerFields(last_name="Babbage"),
                    ],
                ),
            ),
            HTTPStatus.CREATED,
            DealOut,
        )
        assert (deal.volume, deal.employee_id) == (250000, None)
        assert [(linked.last_name, linked.first_name) for linked in deal.customers] == [
            ("Lovelace", "Ada"),
            ("Babbage", None),
        ]

        # Update only if nobody else did: the body carries only the field to change.
        patched = update_customer.sync_detailed(
            customer.id, client=client, body=CustomerPatch(city="Paris"), if_match='"1"'
        )
        updated = answer(patched, HTTPStatus.OK, CustomerOut)
        assert (updated.city, updated.email) == ("Paris", "ada@example.com")
        assert patched.headers["etag"] == '"2"'
        stale = update_customer.sync_detailed(
            customer.id, client=client, body=CustomerPatch(city="Berlin"), if_match='"1"'
        )
        assert problem(stale, HTTPStatus.PRECONDITION_FAILED).code == "precondition_failed"

        # List, page by page: next_cursor goes back as cursor, with the same filters, until null.
        listed: list[UUID] = []
        cursor: str | Unset = UNSET
        while True:
            page = answer(
                list_customers.sync_detailed(client=client, q="lovelace", limit=1, cursor=cursor),
                HTTPStatus.OK,
                CustomerList,
            )
            listed += [row.id for row in page.data]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert listed == [customer.id, deal.customers[0].id], listed

        # Read it back.
        read = get_customer.sync_detailed(customer.id, client=client)
        assert answer(read, HTTPStatus.OK, CustomerOut).city == "Paris"
        assert read.headers["etag"] == '"2"'

        # Retry a create safely: the second send creates nothing and answers the first again.
        first, again = (
            create_deal.sync_detailed(
                client=client,
                body=DealCreate(name="Difference engine", volume=90000),
                idempotency_key="order-4711",
            )
            for _ in range(2)
        )
        assert (
            answer(again, HTTPStatus.CREATED, DealOut).id
            == answer(first, HTTPStatus.CREATED, DealOut).id
        )
        assert again.headers["idempotent-replayed"] == "true"

    print("the README's calls answered as the README shows")


if __name__ == "__main__":
    main()
