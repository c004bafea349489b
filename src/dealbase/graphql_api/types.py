"""What every feature's GraphQL types share: ``read_type`` (an object type whose fields are a
platform read model's attributes), BigInt, the connections, and nested fields' loads."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Generic,
    NewType,
    Protocol,
    TypeVar,
    get_type_hints,
)

import strawberry
from strawberry.types import Info
from strawberry.types.field import StrawberryField

from dealbase.graphql_api.context import GraphQLContext
from dealbase.platform.pagination import Page

GraphQLInfo = Info[GraphQLContext, None]


def _big_int(value: object) -> int:
    # A JSON number only, as REST reads volumes: no strings, no floats, no booleans.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("BigInt takes an integer")
    number = value
    if not -(2**63) <= number < 2**63:
        raise ValueError("BigInt is a 64-bit integer")
    return number


BigInt = NewType("BigInt", int)
# Registered in the schema's scalar_map (graphql_api.schema).
BIG_INT_SCALAR = strawberry.scalar(
    name="BigInt",
    description="A 64-bit integer (GraphQL's Int has 32 bits), as a JSON number.",
    serialize=int,
    parse_value=_big_int,
)

# Nested lists without their own pagination return at most this many items by default.
NESTED_DEFAULT = 25

# Deal and Activity as the features they import name them (a customer's deals, a step's): the
# modules would import each other, so Strawberry finds these types when the schema is built.
if TYPE_CHECKING:
    from dealbase.graphql_api.activities import Activity
    from dealbase.graphql_api.deals import Deal
LazyDeal = Annotated["Deal", strawberry.lazy("dealbase.graphql_api.deals")]
LazyActivity = Annotated["Activity", strawberry.lazy("dealbase.graphql_api.activities")]


# Shared by the Activity type (graphql_api.activities) and the inputs (graphql_api.inputs).
@strawberry.enum
class ActivityType(Enum):
    CALL = "call"
    EMAIL = "email"
    MEETING = "meeting"
    TASK = "task"
    NOTE = "note"


class ReadModel(Protocol):
    """A platform read model: a dataclass (``platform/<feature>/models.py``)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


Declared = TypeVar("Declared", bound=type)


def read_type(
    model: type[ReadModel],
    *,
    leading: tuple[str, ...] = (),
    description: str | None = None,
) -> Callable[[Declared], Declared]:
    """``strawberry.type`` of the decorated class with the fields of ``model``, a platform read
    model: its attributes in its order (``leading`` first, where the SDL's order is not the
    model's), then the class's own fields (its resolvers).

    An attribute the class declares (``volume = strawberry.field(graphql_type=BigInt | None)``)
    keeps its place, as the class says it (its GraphQL type, name, description); every other
    attribute is a plain field of the model's type. So an attribute added to the model is in
    GraphQL without an edit here. The objects are the model's instances themselves: Strawberry
    reads plain fields as attributes, and a resolver reads its parent as
    ``strawberry.Parent[Model]``, which mypy checks."""

    def decorate(cls: Declared) -> Declared:
        hints = get_type_hints(model)
        names = [*leading, *(f.name for f in dataclasses.fields(model) if f.name not in leading)]
        annotations: dict[str, object] = {}
        for name in names:
            declared = cls.__dict__.get(name)
            if isinstance(declared, StrawberryField) and declared.type_annotation is not None:
                annotations[name] = declared.type_annotation.annotation
            else:
                annotations[name] = hints[name]
        # The class's own annotated fields, if any, after the model's.
        cls.__annotations__ = {**annotations, **inspect.get_annotations(cls)}
        return strawberry.type(cls, description=description)

    return decorate


Found = TypeVar("Found")
Shown = TypeVar("Shown")


def now_or_later(
    found: asyncio.Future[Found], shown: Callable[[Found], Shown]
) -> Shown | Awaitable[Shown]:
    """A loader's answer as ``shown`` makes it, now when its batch already ran
    (``loaders.prefetch``), so graphql-core has no awaitable to gather; later otherwise."""
    if found.done():
        return shown(found.result())

    async def later() -> Shown:
        return shown(await found)

    return later()


def settled(found: asyncio.Future[Found]) -> Found | Awaitable[Found]:
    """A loader's answer now when its batch already ran, else the future graphql-core awaits."""
    return found.result() if found.done() else found


Item = TypeVar("Item")


def listed(found: list[Item] | None) -> list[Item]:
    """A nested list's loader answer: None when its parent has none."""
    return found or []


Node = TypeVar("Node")


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.type
class Edge(Generic[Node]):
    node: Node
    cursor: str


@strawberry.type
class Connection(Generic[Node]):
    edges: list[Edge[Node]]
    page_info: PageInfo
    count: strawberry.Private[Callable[[], Awaitable[int]]]

    @strawberry.field(description="How many items match the filters, over every page.")
    async def total_count(self) -> int:
        return await self.count()


def connection(page: Page[Node], count: Callable[[], Awaitable[int]]) -> Connection[Node]:
    """A page as a connection, its items the nodes; ``count`` counts them all when asked."""
    return Connection(
        edges=[
            Edge(node=item, cursor=cursor)
            for item, cursor in zip(page.items, page.cursors, strict=True)
        ],
        page_info=PageInfo(
            has_next_page=page.next_cursor is not None,
            end_cursor=page.cursors[-1] if page.cursors else None,
        ),
        count=count,
    )
