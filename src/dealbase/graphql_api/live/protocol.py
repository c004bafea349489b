"""The live transports' wire terms: their paths and subprotocol, the reasons a connection is
closed for, an operation as a client sends it, and a result as it is sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError
from strawberry.types import ExecutionResult

from dealbase.edge.problems import ProtocolError
from dealbase.edge.request_edge import MAX_BODY_BYTES
from dealbase.errors import RateLimited, Unavailable
from dealbase.graphql_api.errors import mapped_error
from dealbase.platform.live.hub import Ending

WEBSOCKET_PATH = "/graphql"
STREAM_PATH = "/graphql/stream"
PROTOCOL = "graphql-transport-ws"
SSE_MEDIA_TYPE = "text/event-stream"
# A WebSocket message may be as large as a GraphQL request's body (RequestEdge's cap).
MAX_MESSAGE_BYTES = MAX_BODY_BYTES


@dataclass(frozen=True, slots=True)
class Closing:
    """Why the server closes a live connection: a WebSocket close code, and the reason (at most
    123 bytes, a WebSocket's limit), which the stream's last event carries too."""

    code: int
    name: str
    reason: str


# Codes 4400-4499 are graphql-transport-ws' own (clients do not reconnect after them); 1012 and
# 1013 are WebSocket's "restart" and "try again later", after which clients reconnect.
SHUTDOWN = Closing(1012, "shutdown", "Server restarting: reconnect and resume after your cursor")
SLOW_CONSUMER = Closing(
    1013, "slow_consumer", "Slow consumer: too many events waited; resume after your cursor"
)
IDLE = Closing(1000, "idle", "No subscription for too long")
WRITE_TIMEOUT = Closing(1013, "write_timeout", "Not read: the server could not write for too long")
NO_PONG = Closing(1001, "no_pong", "No pong to the server's ping")
INIT_TIMEOUT = Closing(4408, "init_timeout", "Connection initialisation timeout")
TOO_MANY_CONNECTIONS = Closing(4429, "too_many_connections", "Too many connections for this key")
UNAUTHORIZED = Closing(4401, "unauthorized", "Unauthorized")
INTERNAL_ERROR = Closing(1011, "internal_error", "Internal error")
REVOKED = Closing(4403, "revoked", "Forbidden: the key no longer admits this connection")
BAD_REQUEST = Closing(4400, "bad_request", "Bad request")
TOO_BIG = Closing(1009, "too_big", "Message too big")
SUBPROTOCOL = Closing(4406, "subprotocol", "Subprotocol not acceptable")

ENDINGS = {Ending.SHUTDOWN: SHUTDOWN, Ending.SLOW_CONSUMER: SLOW_CONSUMER}


class TooManyConnections(RateLimited):
    code = "too_many_connections"


class ServerStopping(Unavailable):
    pass


@dataclass(frozen=True, slots=True)
class Operation:
    query: str
    variables: dict[str, Any] | None
    operation_name: str | None


def operation_of(payload: Mapping[str, Any]) -> Operation:
    query = payload.get("query")
    variables = payload.get("variables")
    name = payload.get("operationName")
    if not isinstance(query, str):
        raise ProtocolError(400, "unreadable_request", "Unreadable request", "No query given.")
    if variables is not None and not isinstance(variables, dict):
        raise ProtocolError(
            400, "unreadable_request", "Unreadable request", "The variables are not an object."
        )
    if name is not None and not isinstance(name, str):
        raise ProtocolError(
            400, "unreadable_request", "Unreadable request", "The operationName is not a string."
        )
    return Operation(query, variables, name)


def formatted_errors(errors: list[GraphQLError] | None, request_id: str) -> list[Any]:
    """Each error with its code, as a GraphQL response over HTTP shows it."""
    return [mapped_error(error, request_id).formatted for error in errors or []]


def formatted(result: ExecutionResult, request_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = {"data": result.data}
    if result.errors:
        shown["errors"] = formatted_errors(result.errors, request_id)
    if result.extensions:
        shown["extensions"] = result.extensions
    return shown
