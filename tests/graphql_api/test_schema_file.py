"""The committed SDL is the schema the code builds: a change to either shows in review."""

from __future__ import annotations

from pathlib import Path

from dealbase.config import Settings
from dealbase.graphql_api.schema import build_schema

SDL = Path(__file__).parents[2] / "src" / "dealbase" / "graphql_api" / "schema.graphql"


def test_schema_graphql_matches_the_code() -> None:
    printed = build_schema(Settings(database_url=None)).as_str()

    assert SDL.read_text() == printed + "\n", (
        "schema.graphql is stale: run `dealbase graphql-schema > src/dealbase/graphql_api/schema.graphql`"
    )
