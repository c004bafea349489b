"""Webhook endpoints and their delivery log: their types (the platform's read models,
``types.read_type``), queries and mutations."""

from __future__ import annotations

import uuid
from enum import Enum

import strawberry

from dealbase.graphql_api.inputs import WebhookEndpointChanges, WebhookEndpointInput, fields_of
from dealbase.graphql_api.types import Connection, GraphQLInfo, connection, read_type
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE
from dealbase.platform.validation import validated
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as webhooks
from dealbase.platform.webhooks.delivery_models import Attempt as AttemptModel
from dealbase.platform.webhooks.delivery_models import Delivery as DeliveryModel
from dealbase.platform.webhooks.models import WebhookEndpoint as WebhookEndpointModel
from dealbase.platform.webhooks.models import (
    WebhookEndpointFields,
    WebhookEndpointPatch,
    WithSecret,
)


@read_type(
    WebhookEndpointModel,
    description="Where a department's events are sent; its secret is never shown.",
)
class WebhookEndpoint:
    events = strawberry.field(description='Event types, or ["*"] for every type.')
    disabled_reason = strawberry.field(
        description="Why delivery disabled the endpoint; null when enabled or disabled by hand."
    )
    ordered = strawberry.field(
        description="Events are sent one at a time in commit order; false: in parallel."
    )
    previous_secret_expires_at = strawberry.field(
        description="Until when the secret replaced by the last rotation still signs."
    )


@strawberry.type(description="An endpoint with its new signing secret, shown this once.")
class IssuedWebhookSecret:
    endpoint: WebhookEndpointModel = strawberry.field(graphql_type=WebhookEndpoint)
    secret: str = strawberry.field(
        description="Standard Webhooks signing secret: whsec_ and the base64 of the key."
    )

    @classmethod
    def of(cls, issued: WithSecret) -> IssuedWebhookSecret:
        return cls(endpoint=issued, secret=issued.secret)


@strawberry.enum
class WebhookDeliveryState(Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@read_type(AttemptModel, description="One attempt to send a webhook delivery.")
class WebhookDeliveryAttempt:
    status_code = strawberry.field(
        description="The endpoint's HTTP status; null when no answer came (refused, timed out,"
        " an address not allowed)."
    )
    error = strawberry.field(description="Why the attempt failed; null on success.")


@read_type(
    DeliveryModel,
    description="An event (or a test event) on its way to one webhook endpoint, and every"
    " attempt to send it.",
)
class WebhookDelivery:
    endpoint_id = strawberry.field(name="webhookEndpointId")
    event_id = strawberry.field(
        description="The event sent; null for a test event (eventType webhook.test)."
    )
    state = strawberry.field(
        graphql_type=WebhookDeliveryState,
        description="PENDING until an attempt succeeds (DELIVERED) or the retries give up (FAILED).",
    )
    next_attempt_at = strawberry.field(
        description="When a pending delivery is next tried; null once delivered or failed."
    )
    attempts = strawberry.field(
        graphql_type=list[WebhookDeliveryAttempt], description="Every attempt, oldest first."
    )


@strawberry.type
class WebhookQuery:
    @strawberry.field(graphql_type=WebhookEndpoint)
    async def webhook_endpoint(self, info: GraphQLInfo, id: uuid.UUID) -> WebhookEndpointModel:
        return await info.context.run(lambda uow: webhooks.get(uow, id))

    @strawberry.field(
        description="Webhook endpoints, oldest first (a department's, if named).",
        graphql_type=Connection[WebhookEndpoint],
    )
    async def webhook_endpoints(
        self,
        info: GraphQLInfo,
        department_id: uuid.UUID | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[WebhookEndpointModel]:
        scope = await info.context.scope_in(department_id)
        page = await info.context.run(lambda uow: webhooks.list_page(uow, first, after), scope)

        async def count() -> int:
            return await info.context.run(webhooks.count, scope)

        return connection(page, count)

    @strawberry.field(
        description="A webhook endpoint's delivery log, newest first, each delivery with its"
        " attempts.",
        graphql_type=Connection[WebhookDelivery],
    )
    async def webhook_deliveries(
        self,
        info: GraphQLInfo,
        endpoint_id: uuid.UUID,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[DeliveryModel]:
        page = await info.context.run(
            lambda uow: deliveries.list_page(uow, endpoint_id, first, after)
        )

        async def count() -> int:
            return await info.context.run(lambda uow: deliveries.count(uow, endpoint_id))

        return connection(page, count)


@strawberry.type
class WebhookMutation:
    @strawberry.mutation(description="The answer carries the signing secret, shown this once.")
    async def create_webhook_endpoint(
        self, info: GraphQLInfo, input: WebhookEndpointInput, department_id: uuid.UUID | None = None
    ) -> IssuedWebhookSecret:
        scope = await info.context.scope_in(department_id)
        fields = validated(WebhookEndpointFields, fields_of(input))
        checked = await webhooks.checked(fields, info.context.webhook_addresses)
        issued = await info.context.write(lambda uow: webhooks.create(uow, checked), scope)
        return IssuedWebhookSecret.of(issued)

    @strawberry.mutation(graphql_type=WebhookEndpoint)
    async def update_webhook_endpoint(
        self, info: GraphQLInfo, id: uuid.UUID, changes: WebhookEndpointChanges
    ) -> WebhookEndpointModel:
        patch = validated(WebhookEndpointPatch, fields_of(changes))
        checked = await webhooks.checked(patch, info.context.webhook_addresses)
        return await info.context.write(lambda uow: webhooks.update(uow, id, checked))

    @strawberry.mutation
    async def delete_webhook_endpoint(self, info: GraphQLInfo, id: uuid.UUID) -> uuid.UUID:
        await info.context.write(lambda uow: webhooks.delete(uow, id))
        return id

    @strawberry.mutation(
        description="A new signing secret, shown this once; the one it replaces still signs for"
        " 24 hours."
    )
    async def rotate_webhook_secret(self, info: GraphQLInfo, id: uuid.UUID) -> IssuedWebhookSecret:
        return IssuedWebhookSecret.of(
            await info.context.write(lambda uow: webhooks.rotate_secret(uow, id))
        )

    @strawberry.mutation(
        description="Makes the delivery pending and due now, whatever its state: a worker sends"
        " it again, with the same webhook-id, and its three days of retries start again.",
        graphql_type=WebhookDelivery,
    )
    async def redeliver_webhook_delivery(
        self, info: GraphQLInfo, endpoint_id: uuid.UUID, delivery_id: uuid.UUID
    ) -> DeliveryModel:
        return await info.context.write(
            lambda uow: deliveries.redeliver(uow, endpoint_id, delivery_id)
        )

    @strawberry.mutation(
        description="Makes a delivery of a new webhook.test event to this endpoint alone,"
        " whatever it subscribes to; each call sends another.",
        graphql_type=WebhookDelivery,
    )
    async def send_test_webhook(self, info: GraphQLInfo, endpoint_id: uuid.UUID) -> DeliveryModel:
        return await info.context.write(lambda uow: deliveries.send_test(uow, endpoint_id))
