"""RouteIndex: a request reaches the route the router's scan would give it, found by method and
path (a path without parameters) or among the routes of its shape (a path with parameters);
everything no route matches whole is the router's own answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, Router
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from dealbase.edge.route_index import CALLED_DIRECTLY, RouteIndex


def _answers(name: str) -> Callable[[Request], Awaitable[PlainTextResponse]]:
    async def endpoint(request: Request) -> PlainTextResponse:
        route = request.scope["route"]
        return PlainTextResponse(f"{name} {route.path} {dict(request.path_params)}")

    return endpoint


def _indexed(routes: list[Route]) -> tuple[Starlette, RouteIndex]:
    app = Starlette(routes=routes)
    index = RouteIndex(app.router)
    index.install()
    return app, index


async def _no_scan(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the router's scan ran")


def test_a_path_without_parameters_reaches_its_route_by_method() -> None:
    app, _ = _indexed(
        [
            Route("/items", _answers("list"), methods=["GET"]),
            Route("/items", _answers("create"), methods=["POST"]),
        ]
    )
    client = TestClient(app)
    app.router.app = _no_scan  # type: ignore[method-assign]

    assert client.get("/items").text == "list /items {}"
    assert client.post("/items").text == "create /items {}"


def test_a_path_with_parameters_reaches_its_route_among_those_of_its_shape() -> None:
    app, _ = _indexed(
        [
            Route("/orders/{order}", _answers("order"), methods=["GET"]),
            Route("/items/{item}/notes", _answers("notes"), methods=["GET"]),
            Route("/items/{item}", _answers("one"), methods=["GET"]),
            Route("/items/{item}", _answers("change"), methods=["PATCH"]),
            Route("/items/{item:int}/{part}", _answers("part"), methods=["GET"]),
        ]
    )
    client = TestClient(app)
    app.router.app = _no_scan  # type: ignore[method-assign]

    assert client.get("/items/7").text == "one /items/{item} {'item': '7'}"
    assert client.patch("/items/7").text == "change /items/{item} {'item': '7'}"
    assert client.get("/items/7/notes").text == "notes /items/{item}/notes {'item': '7'}"
    assert client.get("/items/7/a").text == "part /items/{item:int}/{part} {'item': 7, 'part': 'a'}"


def test_the_first_route_in_the_routers_order_keeps_a_path_several_match() -> None:
    app, _ = _indexed(
        [
            Route("/items/{item}", _answers("item"), methods=["DELETE"]),
            Route("/{section}/{item}", _answers("any"), methods=["GET"]),
            Route("/items/{item}", _answers("shadowed"), methods=["GET"]),
            Route("/files/{rest:path}", _answers("file"), methods=["GET"]),
            Route("/files/{name}", _answers("name"), methods=["GET"]),
        ]
    )
    client = TestClient(app)

    assert client.get("/items/7").text == "any /{section}/{item} {'section': 'items', 'item': '7'}"
    assert client.delete("/items/7").text == "item /items/{item} {'item': '7'}"
    assert client.get("/files/a/b").text == "file /files/{rest:path} {'rest': 'a/b'}"
    assert client.get("/files/a").text == "any /{section}/{item} {'section': 'files', 'item': 'a'}"


def test_an_earlier_route_with_parameters_keeps_a_path_it_matches() -> None:
    # The router's scan gives GET /items/new to the earlier /items/{item}: so must the index.
    app, _ = _indexed(
        [
            Route("/items/{item}", _answers("one"), methods=["GET"]),
            Route("/items/new", _answers("new"), methods=["GET", "POST"]),
        ]
    )
    client = TestClient(app)

    assert client.get("/items/new").text == "one /items/{item} {'item': 'new'}"
    assert client.post("/items/new").text == "new /items/new {}"


def test_a_method_the_path_does_not_serve_is_the_routers_405_and_an_unknown_path_its_404() -> None:
    app, _ = _indexed(
        [
            Route("/items", _answers("list"), methods=["GET"]),
            Route("/items/{item}", _answers("one"), methods=["GET"]),
        ]
    )
    client = TestClient(app)

    for path in ("/items", "/items/7"):
        refused = client.delete(path)
        assert refused.status_code == 405
        assert set(refused.headers["allow"].split(", ")) == {"GET", "HEAD"}
    assert client.get("/nowhere").status_code == 404
    assert client.get("/items/7/more").status_code == 404


def test_routes_changed_after_the_first_request_are_indexed_again() -> None:
    app, _ = _indexed([Route("/items/new", _answers("new"), methods=["GET"])])
    client = TestClient(app)
    assert client.get("/items/new").text == "new /items/new {}"

    app.router.routes.insert(0, Route("/items/{item}", _answers("one"), methods=["GET"]))
    app.router.routes.append(Route("/later", _answers("later"), methods=["GET"]))

    assert client.get("/items/new").text == "one /items/{item} {'item': 'new'}"
    assert client.get("/later").text == "later /later {}"


def test_a_router_with_middleware_of_its_own_is_refused() -> None:
    router = Router(routes=[], middleware=[Middleware(GZipMiddleware)])

    with pytest.raises(ValueError, match="middleware"):
        RouteIndex(router)


def _called_directly(route: Route) -> Route:
    setattr(route, CALLED_DIRECTLY, True)
    return route


def test_direct_gives_a_route_called_directly_with_the_scope_the_router_gives_it() -> None:
    create = _called_directly(Route("/items", _answers("create"), methods=["POST"]))
    _, index = _indexed([Route("/items", _answers("list"), methods=["GET"]), create])
    scope: Scope = {"type": "http", "method": "POST", "path": "/items", "root_path": ""}

    assert index.direct(scope) is create
    assert scope["route"] is create
    assert scope["endpoint"] is create.endpoint
    assert scope["path_params"] == {}


def test_direct_gives_a_route_with_parameters_the_first_in_the_routers_order() -> None:
    one = _called_directly(Route("/items/{item}", _answers("one"), methods=["GET"]))
    _, index = _indexed([one, _called_directly(Route("/items/new", _answers("new")))])
    scope: Scope = {"type": "http", "method": "GET", "path": "/items/new", "root_path": ""}

    assert index.direct(scope) is one
    assert scope["route"] is one
    assert scope["path_params"] == {"item": "new"}


def test_direct_gives_nothing_for_a_route_not_called_directly_nor_for_an_unmatched_path() -> None:
    _, index = _indexed(
        [
            Route("/items", _answers("list"), methods=["GET"]),
            Route("/items/{item}", _answers("one"), methods=["GET"]),
            _called_directly(Route("/items/{item}/more", _answers("more"), methods=["GET"])),
        ]
    )

    for method, path in (("GET", "/items"), ("GET", "/items/7"), ("POST", "/items/7/more")):
        scope: Scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        assert index.direct(scope) is None, path
        assert "route" not in scope, path


def test_under_a_root_path_direct_gives_the_route_of_the_path_within_it() -> None:
    """A server mounted under a prefix (``--root-path``) sends it as ``root_path``; the router
    matches the path within it, and so does the index."""
    inner = _called_directly(Route("/items", _answers("inner"), methods=["GET"]))
    whole = _called_directly(Route("/api/items", _answers("whole"), methods=["GET"]))
    _, index = _indexed([inner, whole])

    for path, root_path, expected in (
        ("/api/items", "/api", inner),
        ("/api/items", "", whole),
        ("/apiitems", "/api", None),
    ):
        scope: Scope = {"type": "http", "method": "GET", "path": path, "root_path": root_path}
        assert index.direct(scope) is expected, (path, root_path)
