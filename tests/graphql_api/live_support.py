"""Helpers for the live transports' tests: a graphql-transport-ws client over the TestClient's
WebSocket, each wait bounded (a message that never comes fails the test, it does not hang it)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession

PROTOCOL = "graphql-transport-ws"
WAIT_SECONDS = 10.0
API = "/api/v1/integration"

CHANGES = """
subscription Changes($after: String, $departmentId: UUID, $resources: [ChangedResource!]) {
  changes(after: $after, departmentId: $departmentId, resources: $resources) {
    cursor type resource kind recordId departmentId record changedFields previous
  }
}
"""

BOARD = """
subscription Board($departmentId: UUID) {
  pipelineBoard(departmentId: $departmentId) {
    cursor departmentId steps { step { name } dealCount totalVolume }
  }
}
"""


class Closed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason


class LiveSocket:
    """One WebSocket speaking graphql-transport-ws; ``answer_pings`` off leaves the server's
    pings unanswered."""

    def __init__(self, session: WebSocketTestSession, *, answer_pings: bool = True) -> None:
        self.session = session
        self.answer_pings = answer_pings
        self.pings = 0

    def send(self, message: Mapping[str, Any]) -> None:
        self.session.send_text(json.dumps(message))

    def _raw(self, seconds: float) -> dict[str, Any]:
        # Bounded by the test's real clock, not the app's loop's: a test may keep that one still.
        taking = self.session.portal.start_task_soon(self.session._send_rx.receive)
        try:
            message: Any = taking.result(timeout=seconds)
        except TimeoutError:
            taking.cancel()
            raise
        return dict(message)

    def receive(self, seconds: float = WAIT_SECONDS) -> dict[str, Any]:
        """The next protocol message other than a ping (answered, unless told not to); raises
        Closed when the server closes the connection."""
        while True:
            message = self._raw(seconds)
            if message["type"] == "websocket.close":
                raise Closed(message.get("code", 1000), message.get("reason") or "")
            parsed: dict[str, Any] = json.loads(message["text"])
            if parsed["type"] == "ping":
                self.pings += 1
                if self.answer_pings:
                    self.send({"type": "pong"})
                continue
            return parsed

    def pinged(self, seconds: float = WAIT_SECONDS) -> None:
        """Waits for the server's next ping (answered, unless told not to), passing over other
        messages."""
        while True:
            message = self._raw(seconds)
            if message["type"] == "websocket.close":
                raise Closed(message.get("code", 1000), message.get("reason") or "")
            if json.loads(message["text"])["type"] == "ping":
                self.pings += 1
                if self.answer_pings:
                    self.send({"type": "pong"})
                return

    def closed(self, seconds: float = WAIT_SECONDS) -> Closed:
        """Waits for the server to close the connection (skipping other messages)."""
        while True:
            try:
                self.receive(seconds)
            except Closed as closed:
                return closed

    def init(self, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self.send({"type": "connection_init", "payload": dict(payload or {})})
        return self.receive()

    def subscribe(
        self, operation_id: str, query: str, variables: Mapping[str, Any] | None = None
    ) -> None:
        self.send(
            {
                "id": operation_id,
                "type": "subscribe",
                "payload": {"query": query, "variables": dict(variables or {})},
            }
        )

    def next_data(self, operation_id: str, seconds: float = WAIT_SECONDS) -> dict[str, Any]:
        """The data of the operation's next result, which must have no errors."""
        message = self.receive(seconds)
        assert message["id"] == operation_id, message
        assert message["type"] == "next", message
        assert "errors" not in message["payload"], message["payload"]
        data: dict[str, Any] = message["payload"]["data"]
        return data


@contextmanager
def live_socket(
    client: TestClient,
    headers: Mapping[str, str] | None = None,
    *,
    init: Mapping[str, Any] | None = None,
    answer_pings: bool = True,
) -> Iterator[LiveSocket]:
    """A WebSocket at /graphql, acknowledged after ``init`` as connection_init's payload."""
    with client.websocket_connect(
        "/graphql", subprotocols=[PROTOCOL], headers=dict(headers or {})
    ) as session:
        socket = LiveSocket(session, answer_pings=answer_pings)
        assert socket.init(init) == {"type": "connection_ack"}
        yield socket


def create_customer(client: TestClient, headers: Mapping[str, str], name: str) -> dict[str, Any]:
    response = client.post(f"{API}/customers", json={"last_name": name}, headers=dict(headers))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


STREAM = "/graphql/stream"
SSE = {"Accept": "text/event-stream"}


@dataclass(frozen=True)
class ServerEvent:
    event: str
    id: str | None
    data: Any


class Stream:
    """The events of one response, read as they come; ``comments`` counts the comment lines."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.iter_lines()
        self.comments = 0

    def next_event(self) -> ServerEvent:
        fields: dict[str, str] = {}
        for line in self._lines:
            if line.startswith(":"):
                self.comments += 1
            elif line == "":
                if fields:
                    return ServerEvent(
                        fields["event"], fields.get("id"), json.loads(fields["data"])
                    )
            else:
                name, _, value = line.partition(": ")
                fields[name] = value
        raise EOFError("the stream ended")

    def ended(self) -> bool:
        try:
            self.next_event()
        except EOFError:
            return True
        return False


@contextmanager
def stream(
    client: TestClient,
    headers: dict[str, str],
    query: str,
    variables: dict[str, Any] | None = None,
) -> Iterator[Stream]:
    with client.stream(
        "POST",
        STREAM,
        json={"query": query, "variables": variables or {}},
        headers={**SSE, **headers},
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)
