"""One execution of a subscription's document per change, whatever the number of subscribers.

A department's channel hands the same change to each of its subscribers (the same object:
``subscriptions.change_of`` makes one ``Change`` of it for all). graphql-core would execute the
document's selection once per subscriber, so the CPU a change costs would grow with the
dashboards open on its department. The execution context of the
live schema keeps each result by (operation, the variables its selection reads, root value),
and a subscriber with the same document gets the result another subscriber's execution made.

Only the variables read below the root field count: the root field's own arguments (``after``,
``departmentId``) chose the stream, not what an event shows, so clients that resumed from
different cursors still share.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, ClassVar

from graphql import (
    Executor,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    ListValueNode,
    Node,
    ObjectValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValueNode,
    VariableNode,
)

# Results kept (the most recently used): one per document, variables and change.
SHARED_RESULTS = 2048


class _Entry:
    __slots__ = ("encoded", "operation", "result", "root")

    def __init__(self, operation: OperationDefinitionNode, root: object, result: Any) -> None:
        # Kept to tell an entry from another whose objects took the same ids.
        self.operation = operation
        self.root = root
        self.result = result
        # The result's data as JSON, once a transport that sends it itself has encoded it.
        self.encoded: str | None = None


def _variables_in_value(value: ValueNode) -> Iterator[str]:
    if isinstance(value, VariableNode):
        yield value.name.value
    elif isinstance(value, ListValueNode):
        for item in value.values:
            yield from _variables_in_value(item)
    elif isinstance(value, ObjectValueNode):
        for field in value.fields:
            yield from _variables_in_value(field.value)


def _variables_below(
    node: Node,
    fragments: dict[str, FragmentDefinitionNode],
    seen: set[str],
    *,
    root: bool = False,
) -> Iterator[str]:
    """The variables ``node`` reads: its directives', its arguments' (not the root field's),
    its selections' and the fragments' they spread."""
    for directive in getattr(node, "directives", None) or ():
        for argument in directive.arguments or ():
            yield from _variables_in_value(argument.value)
    if not (isinstance(node, FieldNode) and root):
        for argument in getattr(node, "arguments", None) or ():
            yield from _variables_in_value(argument.value)
    if isinstance(node, FragmentSpreadNode):
        name = node.name.value
        if name in seen or name not in fragments:
            return
        seen.add(name)
        node = fragments[name]
    selection_set: SelectionSetNode | None = getattr(node, "selection_set", None)
    for selection in selection_set.selections if selection_set is not None else ():
        yield from _variables_below(selection, fragments, seen)


def _read_below_root(
    operation: OperationDefinitionNode, fragments: dict[str, FragmentDefinitionNode]
) -> frozenset[str]:
    seen: set[str] = set()
    names: set[str] = set()
    for selection in operation.selection_set.selections:
        is_field = isinstance(selection, FieldNode)
        if not is_field and not isinstance(selection, FragmentSpreadNode | InlineFragmentNode):
            continue
        names.update(_variables_below(selection, fragments, seen, root=is_field))
    return frozenset(names)


class _Shared:
    """A per-event executor whose result another subscriber's execution made: graphql-core
    asks it only for ``execute_operation``, and a copy of the subscription's executor (what
    graphql-core builds per event) would be made for nothing."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result

    def execute_operation(self, serially: bool | None = None) -> Any:
        return _each_its_own(self.result)


class _ResultSharing(Executor[Any]):
    """What ``sharing_results`` adds to an executor class; each class it makes has its own
    ``_shared`` results and ``_reads``."""

    _shared: ClassVar[OrderedDict[tuple[int, tuple[tuple[str, str], ...], int], _Entry]]
    _reads: ClassVar[dict[int, tuple[OperationDefinitionNode, frozenset[str]]]]
    _event_key: tuple[int, tuple[tuple[str, str], ...], int] | None = None
    # The subscription's (operation, the values of the variables read below its root
    # field): the same for each of its events, found once.
    _subscription_key: tuple[int, tuple[tuple[str, str], ...]] | None = None

    @classmethod
    def build(cls, *args: Any, **kwargs: Any) -> Any:
        built = super().build(*args, **kwargs)
        if isinstance(built, Executor) and hasattr(built.context_value, "executor"):
            built.context_value.executor = built
        return built

    def build_per_event_executor(self, payload: Any) -> Any:
        key = self._key_of(payload)
        entry = self._entry(key, payload)
        if entry is not None:
            self._shared.move_to_end(key)
            return _Shared(entry.result)
        executor: Any = super().build_per_event_executor(payload)
        executor._event_key = key
        return executor

    def encoded(self, payload: Any) -> str | None:
        """The data of the event's result as JSON, if a subscriber has left it (``keep``):
        the transport that sends it then neither executes nor encodes it again."""
        entry = self._entry(self._key_of(payload), payload)
        return None if entry is None else entry.encoded

    def keep(self, payload: Any, encoded: str) -> None:
        """Leaves the data of the event's result, as JSON, for the other subscribers."""
        entry = self._entry(self._key_of(payload), payload)
        if entry is not None:
            entry.encoded = encoded

    def _key_of(self, payload: Any) -> tuple[int, tuple[tuple[str, str], ...], int]:
        known = self._subscription_key
        if known is None:
            known = self._subscription_key = (id(self.operation), self._read_values())
        return (*known, id(payload))

    def _entry(
        self, key: tuple[int, tuple[tuple[str, str], ...], int], payload: Any
    ) -> _Entry | None:
        entry = self._shared.get(key)
        if entry is not None and entry.operation is self.operation and entry.root is payload:
            return entry
        return None

    def _read_values(self) -> tuple[tuple[str, str], ...]:
        operation = self.operation
        known = self._reads.get(id(operation))
        if known is None or known[0] is not operation:
            fragments = {name: found.definition for name, found in self.fragments.items()}
            known = (operation, _read_below_root(operation, fragments))
            self._reads[id(operation)] = known
            if len(self._reads) > SHARED_RESULTS:
                self._reads.pop(next(iter(self._reads)))
        values = self.variable_values.coerced
        return tuple(sorted((name, repr(values.get(name))) for name in known[1]))

    def execute_operation(self, serially: bool | None = None) -> Any:
        key = self._event_key
        if key is None:
            return super().execute_operation(serially)
        shared = self._shared
        entry = shared.get(key)
        if (
            entry is not None
            and entry.operation is self.operation
            and entry.root is (self.root_value)
        ):
            shared.move_to_end(key)
            return _each_its_own(entry.result)
        result = super().execute_operation(serially)
        if self.is_awaitable(result):
            # Those that come while it runs wait for the same execution.
            result = asyncio.ensure_future(result)
            result.add_done_callback(lambda done: _forget_failed(shared, key, done))
        shared[key] = _Entry(self.operation, self.root_value, result)
        if len(shared) > SHARED_RESULTS:
            shared.popitem(last=False)
        return _each_its_own(result)


def sharing_results(base: type[Executor[Any]]) -> type[Executor[Any]]:
    """``base`` with the results of subscription events shared between subscribers. Each
    subscription's executor is also left on its context, when the context has an
    ``executor`` attribute: a transport that sends a subscription's events itself
    (``graphql_api.live``) renders each with it."""

    class SharingResults(_ResultSharing, base):  # type: ignore[valid-type, misc]
        _shared = OrderedDict()
        _reads = {}

    return SharingResults


def _each_its_own(result: Any) -> Any:
    """A running execution as each subscriber awaits it: one of them cancelled (its client
    gone) does not cancel it for the others."""
    return asyncio.shield(result) if isinstance(result, asyncio.Future) else result


def _forget_failed(shared: OrderedDict[Any, _Entry], key: Any, done: asyncio.Future[Any]) -> None:
    if done.cancelled() or done.exception() is not None:
        shared.pop(key, None)
