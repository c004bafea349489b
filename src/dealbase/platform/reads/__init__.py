"""Reads answered whole by PostgreSQL: a tree of what to read becomes one statement that builds
the answer's JSON (GraphQL's compiled reads)."""
