"""The router's matching in one lookup for the paths without parameters.

Starlette's router tries its routes one after another, each a regular expression over the path,
until one matches path and method: `POST /deals` went through 16 routes first, about 50 Python
calls a request. A path without parameters has one route that a request with that method and
path reaches (the first that matches it whole); ``RouteIndex`` finds it by the method and path,
and hands anything else to the router as it is (paths with parameters, a method the path does
not serve, WebSockets, the lifespan), so every answer is the router's own.
"""

from __future__ import annotations

from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Receive, Scope, Send


class RouteIndex:
    """The ASGI app of ``router``: its routes without path parameters looked up by method and
    path, the rest matched by the router. Built at the first request from the routes then
    installed, and again whenever their number changes."""

    def __init__(self, router: Router) -> None:
        if router.middleware_stack != router.app:
            raise ValueError("the router has middleware of its own, which a lookup would skip")
        self.router = router
        self._index: dict[tuple[str, str], BaseRoute] = {}
        self._indexed = -1  # how many routes the index was built from

    def install(self) -> None:
        self.router.middleware_stack = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if len(self.router.routes) != self._indexed:
                self._build()
            route = self._index.get((scope["method"], get_route_path(scope)))
            if route is not None:
                # FULL by construction; checked, since the child scope comes from it anyway.
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope.setdefault("router", self.router)
                    scope["route"] = route
                    scope.update(child_scope)
                    await route.handle(scope, receive, send)
                    return
        await self.router.app(scope, receive, send)

    def _build(self) -> None:
        routes = list(self.router.routes)
        index: dict[tuple[str, str], BaseRoute] = {}
        for route in routes:
            if not isinstance(route, Route) or route.param_convertors or not route.methods:
                continue
            for method in route.methods:
                probe: Scope = {
                    "type": "http",
                    "path": route.path,
                    "root_path": "",
                    "method": method,
                }
                # The route the router's scan gives this method and path: the first to match
                # it whole, which may be an earlier route (a mount, a path with parameters).
                first = next(
                    (each for each in routes if each.matches(probe)[0] is Match.FULL), None
                )
                if first is route:
                    index[(method, route.path)] = route
        self._index, self._indexed = index, len(routes)
