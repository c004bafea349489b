"""``read_type``: a GraphQL object type made of a platform read model, whose instances are its
objects."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import strawberry
from strawberry.schema.config import StrawberryConfig

from dealbase.graphql_api.types import BIG_INT_SCALAR, BigInt, read_type

NOTE_ID = uuid.UUID("01900000-0000-7000-8000-000000000001")


@dataclass(frozen=True, slots=True)
class NoteModel:
    id: uuid.UUID
    text: str
    words: int
    fax: str | None  # added to the model alone: GraphQL shows it


def shouted(note: strawberry.Parent[NoteModel]) -> str:
    return note.text.upper()


@read_type(NoteModel, leading=("text",), description="A note.")
class Note:
    words = strawberry.field(graphql_type=BigInt, description="How many words.")
    shout = strawberry.field(resolver=shouted)


def a_note() -> NoteModel:
    return NoteModel(id=NOTE_ID, text="hello", words=1, fax=None)


@strawberry.type
class Query:
    note = strawberry.field(resolver=a_note, graphql_type=Note)


SCHEMA = strawberry.Schema(
    query=Query, config=StrawberryConfig(scalar_map={BigInt: BIG_INT_SCALAR})
)


def test_the_models_attributes_are_plain_fields_in_its_order_with_what_the_type_declares() -> None:
    printed = SCHEMA.as_str()

    assert (
        '''"""A note."""
type Note {
  text: String!
  id: UUID!

  """How many words."""
  words: BigInt!
  fax: String
  shout: String!
}'''
        in printed
    )


def test_the_objects_are_the_models_instances_and_resolvers_read_them() -> None:
    result = SCHEMA.execute_sync("{ note { id text words fax shout } }")

    assert result.errors is None
    assert result.data == {
        "note": {"id": str(NOTE_ID), "text": "hello", "words": 1, "fax": None, "shout": "HELLO"}
    }
