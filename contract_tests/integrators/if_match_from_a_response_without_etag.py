"""An If-Match taken from a response that carried no ETag: ``headers.get("etag")`` hands over
None. httpx refuses a header whose value is None, so the generated client must refuse it first:
``mypy --strict`` reports this module's one call (and nothing else), since the document types
If-Match as a string that is sent or left out, never null.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from dealbase_client import AuthenticatedClient
from dealbase_client.api.customers import update_customer
from dealbase_client.models import CustomerPatch


def update_guarded_by(
    client: AuthenticatedClient, customer_id: UUID, headers: Mapping[str, str]
) -> None:
    update_customer.sync_detailed(
        customer_id, client=client, body=CustomerPatch(city="Paris"), if_match=headers.get("etag")
    )
