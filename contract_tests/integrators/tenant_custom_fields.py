"""A customer's custom fields as a Python integrator sets them, with the client that
openapi-python-client generates from the tenant's own document (the package ``dealbase_client``,
on PYTHONPATH). ``mypy --strict`` must accept it; then it runs against a live server, which must
answer with the values.

SERVER_URL, API_KEY, DEPARTMENT_ID and TIER_GOLD (the select's option id) come from the
environment.
"""

from __future__ import annotations

import os
from datetime import date
from http import HTTPStatus

from dealbase_client import AuthenticatedClient
from dealbase_client.api.customers import create_customer
from dealbase_client.models import (
    CustomerFields,
    CustomerFieldsCustomFields,
    CustomerFieldsCustomFieldsTierType0,
    CustomerOut,
)


def main() -> None:
    client = AuthenticatedClient(
        base_url=os.environ["SERVER_URL"],
        token=os.environ["API_KEY"],
        auth_header_name="X-Api-Key",
        prefix="",
        headers={"X-Department-Id": os.environ["DEPARTMENT_ID"]},
    )
    values = CustomerFieldsCustomFields(
        seats=12,
        revenue="1234.50",
        vip=True,
        renewal=date(2027, 6, 30),
        tier=CustomerFieldsCustomFieldsTierType0(os.environ["TIER_GOLD"]),
    )
    response = create_customer.sync_detailed(
        client=client, body=CustomerFields(last_name="Lovelace", custom_fields=values)
    )
    assert response.status_code == HTTPStatus.CREATED, response.content
    customer = response.parsed
    assert isinstance(customer, CustomerOut), response.content
    # A response's values are typed too: seats is an int or None.
    seats: int | None = customer.custom_fields.seats
    assert seats == 12
    assert customer.custom_fields.to_dict() == values.to_dict()
    print("custom fields set as typed")


if __name__ == "__main__":
    main()
