"""The router's matching in one lookup for the paths without parameters, and among a few routes
for the others.

Starlette's router tries its routes one after another, each a regular expression over the path,
until one matches path and method: a request for a route late in its list goes through every
route before it, on every request. A path without parameters has
one route that a request with that method and path reaches (the first that matches it whole);
``RouteIndex`` finds it by the method and path. A path with parameters can only be matched by
the routes of as many segments with the same text before their first parameter (and by those
whose shape says nothing: mounts, a ``path`` parameter): ``RouteIndex`` tries those alone, in
the router's order, so the first to match whole is the router's. Anything no route matches
whole (a method the path does not serve, an unknown path, WebSockets, the lifespan) goes to
the router as it is, so every other answer is the router's own.
"""

from __future__ import annotations

from operator import itemgetter

from starlette.convertors import FloatConvertor, IntegerConvertor, StringConvertor, UUIDConvertor
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Receive, Scope, Send

# A route and its place in the router's order.
Placed = tuple[int, BaseRoute]
# Set on a route whose ASGI app maps its own errors through the app's exception handlers (as a
# Starlette ``request_response`` endpoint does) and reads nothing the layers between the request
# edge and the router put in the scope but those handlers: ``RouteIndex.direct`` gives it.
CALLED_DIRECTLY = "called_directly"
# Parameters that match within one segment of a path (not ``path``, nor one registered later).
_ONE_SEGMENT = (StringConvertor, IntegerConvertor, FloatConvertor, UUIDConvertor)


def route_path(scope: Scope) -> str:
    """The path a router matches its routes against: the request's path within its
    ``root_path`` (where an app is mounted under a prefix), as Starlette's router reads it."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


class RouteIndex:
    """The ASGI app of ``router``: its routes without path parameters looked up by method and
    path, the rest matched by the router. Built at the first request from the routes then
    installed, and again whenever their number changes."""

    def __init__(self, router: Router) -> None:
        if router.middleware_stack != router.app:
            raise ValueError("the router has middleware of its own, which a lookup would skip")
        self.router = router
        self._index: dict[tuple[str, str], BaseRoute] = {}
        # Routes with parameters by their number of segments, then by how many segments come
        # before their first parameter and what those are; each with its place in the router's
        # order.
        self._shaped: dict[int, dict[int, dict[tuple[str, ...], list[Placed]]]] = {}
        # Routes any path may match, with their places.
        self._anywhere: list[Placed] = []
        self._indexed = -1  # how many routes the index was built from

    def install(self) -> None:
        self.router.middleware_stack = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if len(self.router.routes) != self._indexed:
                self._build()
            path = route_path(scope)
            route = self._index.get((scope["method"], path))
            # FULL by construction; checked, since the child scope comes from it anyway.
            for candidate in (route,) if route is not None else self._candidates(path):
                match, child_scope = candidate.matches(scope)
                if match is Match.FULL:
                    scope.setdefault("router", self.router)
                    scope["route"] = candidate
                    scope.update(child_scope)
                    await candidate.handle(scope, receive, send)
                    return
        await self.router.app(scope, receive, send)

    def direct(self, scope: Scope) -> BaseRoute | None:
        """The route an HTTP request reaches when that route is ``CALLED_DIRECTLY``, with the
        scope as the router gives it; else None, and the scope untouched."""
        if len(self.router.routes) != self._indexed:
            self._build()
        path = route_path(scope)
        route = self._index.get((scope["method"], path))
        if route is not None:
            if not getattr(route, CALLED_DIRECTLY, False):
                return None
            # What Route.matches gives a path without parameters, without its expression.
            scope.setdefault("router", self.router)
            scope["route"] = route
            scope["endpoint"] = route.endpoint  # type: ignore[attr-defined]
            scope["path_params"] = {**scope.get("path_params", {})}
            return route
        for candidate in self._candidates(path):
            match, child_scope = candidate.matches(scope)
            if match is Match.FULL:
                if not getattr(candidate, CALLED_DIRECTLY, False):
                    return None
                scope.setdefault("router", self.router)
                scope["route"] = candidate
                scope.update(child_scope)
                return candidate
        return None

    def _candidates(self, path: str) -> list[BaseRoute]:
        """The routes that may match ``path`` whole, in the router's order."""
        segments = path.split("/")
        found = list(self._anywhere)
        for before, by_prefix in self._shaped.get(len(segments), {}).items():
            found += by_prefix.get(tuple(segments[:before]), ())
        found.sort(key=itemgetter(0))
        return [route for _, route in found]

    def _build(self) -> None:
        routes = list(self.router.routes)
        index: dict[tuple[str, str], BaseRoute] = {}
        shaped: dict[int, dict[int, dict[tuple[str, ...], list[Placed]]]] = {}
        anywhere: list[Placed] = []
        for place, route in enumerate(routes):
            if isinstance(route, Route) and route.param_convertors:
                if all(isinstance(each, _ONE_SEGMENT) for each in route.param_convertors.values()):
                    segments = route.path.split("/")
                    before = next(n for n, segment in enumerate(segments) if "{" in segment)
                    by_prefix = shaped.setdefault(len(segments), {}).setdefault(before, {})
                    by_prefix.setdefault(tuple(segments[:before]), []).append((place, route))
                else:
                    anywhere.append((place, route))
                continue
            if not isinstance(route, Route) or not route.methods:
                anywhere.append((place, route))
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
        self._index, self._shaped, self._anywhere = index, shaped, anywhere
        self._indexed = len(routes)
