"""Mounts the GraphQL API at /graphql."""

from __future__ import annotations

from fastapi import FastAPI
from strawberry.fastapi import GraphQLRouter

from dealbase.config import Settings
from dealbase.graphql_api.context import context_for
from dealbase.graphql_api.schema import build_schema

GRAPHQL_PATH = "/graphql"


def install_graphql_api(app: FastAPI, settings: Settings) -> None:
    router: GraphQLRouter[object, None] = GraphQLRouter(
        build_schema(settings),
        path=GRAPHQL_PATH,
        context_getter=context_for,
        graphql_ide="graphiql" if settings.graphql_ide else None,
        # Mutations only by POST; queries by GET too (cacheable dashboards).
        allow_queries_via_get=True,
        include_in_schema=False,
    )
    app.include_router(router)
