"""Mounts the integration API on an app: routers, problem+json mapping, OpenAPI document (and
each tenant's own, ``tenant_openapi``)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from dealbase.edge.problems import install_problem_handlers
from dealbase.rest_api import (
    activities,
    custom_fields,
    customers,
    deals,
    events,
    pipeline,
    tenant_openapi,
    webhooks,
)
from dealbase.rest_api.openapi import install_openapi
from dealbase.rest_api.responses import API_PREFIX


def install_rest_api(app: FastAPI) -> None:
    integration = APIRouter(prefix=API_PREFIX)
    integration.include_router(customers.router)
    integration.include_router(deals.router)
    integration.include_router(activities.router)
    integration.include_router(pipeline.router)
    integration.include_router(webhooks.router)
    integration.include_router(events.router)
    integration.include_router(custom_fields.router)
    integration.include_router(tenant_openapi.router)
    app.include_router(integration)
    install_problem_handlers(app)
    install_openapi(app)
    tenant_openapi.install_tenant_documents(app)
