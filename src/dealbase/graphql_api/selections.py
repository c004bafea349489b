"""What a document selects inside the field being resolved: a list's root field reads it to
prefetch its nodes' nested fields (``loaders.prefetch``) before graphql-core asks for them."""

from __future__ import annotations

from collections.abc import Sequence

from strawberry.types.nodes import SelectedField, Selection

from dealbase.errors import Invalid
from dealbase.graphql_api.types import NESTED_DEFAULT, GraphQLInfo
from dealbase.platform.pagination import page_size


def selected(selections: Sequence[Selection], path: str) -> SelectedField | None:
    """The document's first selection of the field at ``path`` (dotted field names, not
    aliases), through fragments. ``@skip`` and ``@include`` are not read: at worst a prefetch
    loads what no field asks for."""
    name, _, rest = path.partition(".")
    for selection in selections:
        if not isinstance(selection, SelectedField):
            found = selected(selection.selections, path)
        elif selection.name != name:
            continue
        else:
            found = selected(selection.selections, rest) if rest else selection
        if found is not None:
            return found
    return None


def within(info: GraphQLInfo) -> list[Selection]:
    """What the document selects inside the field being resolved (each of its nodes)."""
    return [inner for field in info.selected_fields for inner in field.selections]


def nested_page_size(selections: Sequence[Selection], path: str) -> int | None:
    """The page size of the nested list at ``path`` as its field will ask for it, or None when
    it is not selected or its ``first`` is one the field will refuse (it reports that)."""
    field = selected(selections, path)
    if field is None:
        return None
    # A literal comes as its text (Strawberry does not coerce it), a variable as its value;
    # validation has made either a valid Int.
    try:
        return page_size(int(field.arguments.get("first", NESTED_DEFAULT)))
    except Invalid:
        return None
