"""The same customer's custom fields set with values of the wrong types: ``mypy --strict`` must
report each line marked ``refused:``, and no other, as the tenant's own document types them."""

from __future__ import annotations

from dealbase_client.models import CustomerFields, CustomerFieldsCustomFields

BODY = CustomerFields(
    last_name="Lovelace",
    custom_fields=CustomerFieldsCustomFields(
        seats="12",  # refused: an int, not text
        revenue="1234.50",
        vip=True,
        tier="gold",  # refused: an option of the generated enum, not a label
    ),
)
