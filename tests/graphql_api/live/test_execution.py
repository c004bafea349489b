"""Subscribers of one department with the same document share each change's execution: what a
change costs to execute does not grow with them, and a variable their selection reads (not the
root field's own, such as ``after``) keeps them apart."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.graphql_api import loaders
from tests.graphql_api.live_support import API, LiveSocket, live_socket
from tests.support import TenantWorld

BOARD_WITH_DEALS = """
subscription ($first: Int!, $departmentId: UUID) {
  pipelineBoard(departmentId: $departmentId) {
    cursor steps { dealCount deals(first: $first) { name } }
  }
}
"""


def _boards_after_a_deal(
    client: TestClient, world: TenantWorld, firsts: list[int], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[list[dict[str, Any]]], int]:
    """What each subscriber (one per ``first``) gets until its board shows the new deal, and
    how many times a step's deals were asked of the loaders meanwhile."""
    asked = [0]
    deals_of_step = loaders.deals_of_step

    def counted(context: Any, step_id: uuid.UUID, first: int) -> Any:
        asked[0] += 1
        return deals_of_step(context, step_id, first)

    with ExitStack() as stack:
        sockets: list[LiveSocket] = []
        for first in firsts:
            socket = stack.enter_context(live_socket(client, init=world.key.headers))
            socket.subscribe("1", BOARD_WITH_DEALS, {"first": first})
            socket.next_data("1")
            sockets.append(socket)
        monkeypatch.setattr(loaders, "deals_of_step", counted)
        response = client.post(
            f"{API}/deals",
            json={"name": "Engine", "volume": 1, "customers": []},
            headers=world.key.headers,
        )
        assert response.status_code == 201, response.text
        received = []
        for socket in sockets:
            boards = [socket.next_data("1")["pipelineBoard"]]
            while boards[-1]["steps"][0]["dealCount"] < 1:
                boards.append(socket.next_data("1")["pipelineBoard"])
            received.append(boards)
        return received, asked[0]


def test_subscribers_with_one_document_share_each_changes_execution(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    received, asked = _boards_after_a_deal(client, world, [5, 5, 5], monkeypatch)
    assert received[0] == received[1] == received[2]
    assert received[0][-1]["steps"][0]["deals"] == [{"name": "Engine"}]
    steps = len(received[0][-1]["steps"])
    # Each board the three received was executed once: its steps' deals asked for once.
    assert asked == steps * len(received[0])


def test_a_variable_the_selection_reads_keeps_subscribers_apart(
    client: TestClient, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.post(
        f"{API}/deals",
        json={"name": "Older", "volume": 1, "customers": []},
        headers=world.key.headers,
    )
    received, _ = _boards_after_a_deal(client, world, [1, 2], monkeypatch)
    one, two = (boards[-1]["steps"][0] for boards in received)
    assert (one["dealCount"], one["deals"]) == (2, [{"name": "Older"}])
    assert (two["dealCount"], two["deals"]) == (2, [{"name": "Older"}, {"name": "Engine"}])
