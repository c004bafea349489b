"""Subscriptions on the wire: ``graphql-transport-ws`` over a WebSocket at ``/graphql``, and
``graphql-sse`` (its distinct connections mode: one subscription per request) at
``/graphql/stream``, for networks whose proxies refuse WebSockets.

Both authenticate like a GraphQL request (``edge.live_callers``), run the operation through the
same schema (its guards and error codes), and keep the limits of ``LiveLimits``: connections per
key (per server process), WebSockets not yet introduced (per client address and per process),
subscriptions per WebSocket, the time a WebSocket may take to introduce itself, stay without a
subscription, or leave a ping unanswered, and the time a write may wait for a client that does
not read. Each operation is admitted by the key's rate limits, as a request is, and so is each
board after a subscription's first (it runs the document again): refused, it waits, then goes
out as the newest board. The hub ends a subscription whose client reads too slowly, and the
server stopping ends them all; a key's revocation or its tenant's suspension (heard on the key
channel), or its expiry (checked at each keep-alive), closes its connections.
"""

from __future__ import annotations

from fastapi import FastAPI

from dealbase.graphql_api.live.protocol import STREAM_PATH, WEBSOCKET_PATH
from dealbase.graphql_api.live.service import LiveService
from dealbase.graphql_api.live.stream import graphql_stream
from dealbase.graphql_api.live.websocket import graphql_websocket


def install_live(app: FastAPI, service: LiveService) -> None:
    """Mounts both transports; call it before the GraphQL API's routes, whose WebSocket route
    at /graphql this one precedes."""
    app.state.live = service
    app.add_api_websocket_route(WEBSOCKET_PATH, graphql_websocket)
    app.add_api_route(STREAM_PATH, graphql_stream, methods=["GET", "POST"], include_in_schema=False)
