"""Values written into a script's SQL text read back from PostgreSQL as exactly what was given;
a text with a NUL is refused, and a kind the writer does not know is left to psycopg. A value
bound as a text parameter reaches a prepared statement as its literal in ``EXECUTE`` does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dealbase.db.literals import execute_call, inline, literal, parameters


@pytest.fixture(scope="module")
def connection(postgres_server: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_server, autocommit=True) as opened:
        yield opened


def _read_back(connection: psycopg.Connection[tuple[object, ...]], value: object) -> object:
    written = literal(value, psycopg.pq.Escaping(connection.pgconn).escape_literal)
    assert written is not None
    row = connection.execute(f"SELECT {written}").fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        uuid.UUID("0190f0e2-6a3e-7c4d-8b1a-2f3e4d5c6b7a"),
        date(1, 1, 1),
        date(2026, 11, 25),
        datetime(2026, 11, 25, 22, 5, 1, 123456, tzinfo=UTC),
        datetime(2026, 11, 25, 22, 5, 1, 123456, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2026, 11, 25, 22, 5, 1),
        Decimal("-12345678901234567890.000001"),
        "",
        "O'Brien; DROP TABLE customers; --",
        "back\\slash \\' and E'quotes'",
        "$$ dollar $tag$ quoting $$",
        "Ünïcødé ✓ \U0001d518 \u202e",
        b"",
        bytes(range(256)),
        b"'; DROP TABLE customers; --\\",
    ],
    ids=repr,
)
def test_each_kind_of_value_reads_back_as_itself(
    connection: psycopg.Connection[tuple[object, ...]], value: object
) -> None:
    assert _read_back(connection, value) == value


def test_bytes_as_sqlalchemy_hands_them_to_the_driver_read_back_as_themselves(
    connection: psycopg.Connection[tuple[object, ...]],
) -> None:
    assert _read_back(connection, psycopg.Binary(b"\x00\xff'")) == b"\x00\xff'"


@given(
    text=st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
)
def test_any_text_reads_back_as_itself(
    connection: psycopg.Connection[tuple[object, ...]], text: str
) -> None:
    assert _read_back(connection, text) == text


def test_a_text_with_a_nul_is_refused_rather_than_cut_short(
    connection: psycopg.Connection[tuple[object, ...]],
) -> None:
    with pytest.raises(psycopg.DataError):
        literal("before\x00after", psycopg.pq.Escaping(connection.pgconn).escape_literal)


def test_a_negative_number_after_a_minus_stays_a_number_not_a_comment(
    connection: psycopg.Connection[tuple[object, ...]],
) -> None:
    escape = psycopg.pq.Escaping(connection.pgconn).escape_literal
    sql = inline("SELECT 10 -%(n)s", {"n": -1}, escape)
    assert sql is not None
    row = connection.execute(sql).fetchone()
    assert row == (11,)


def test_parameters_and_percent_signs_are_written_as_psycopg_would(
    connection: psycopg.Connection[tuple[object, ...]],
) -> None:
    escape = psycopg.pq.Escaping(connection.pgconn).escape_literal
    values = {"a": "50%(b)s", "b": 7}
    sql = inline("SELECT %(a)s || ' 100%%', %(b)s, %(a)s", values, escape)
    assert sql is not None
    assert sql == psycopg.ClientCursor(connection).mogrify(
        "SELECT %(a)s || ' 100%%', %(b)s, %(a)s", values
    )
    assert connection.execute(sql).fetchone() == ("50%(b)s 100%", 7, "50%(b)s")


@pytest.mark.parametrize(
    ("value", "array_type"),
    [
        ([], "text[]"),
        (["a", None, "", "NULL", 'quo"te', "back\\slash", "{braces}, comma", "Ünï ✓"], "text[]"),
        ([uuid.UUID("0190f0e2-6a3e-7c4d-8b1a-2f3e4d5c6b7a"), None], "uuid[]"),
        ([1, -2, 2**40], "bigint[]"),
        ([True, False, None], "boolean[]"),
        ([date(2026, 11, 25), date(1, 1, 1)], "date[]"),
        ([datetime(2026, 11, 25, 22, 5, 1, 123456, tzinfo=UTC)], "timestamptz[]"),
    ],
    ids=repr,
)
def test_a_list_reads_back_as_itself_through_the_array_type_its_statement_casts_to(
    connection: psycopg.Connection[tuple[object, ...]], value: list[object], array_type: str
) -> None:
    written = literal(value, psycopg.pq.Escaping(connection.pgconn).escape_literal)
    assert written is not None
    row = connection.execute(f"SELECT CAST({written} AS {array_type})").fetchone()
    assert row == (value,)


@given(
    texts=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
    )
)
def test_any_list_of_texts_reads_back_as_itself(
    connection: psycopg.Connection[tuple[object, ...]], texts: list[str]
) -> None:
    written = literal(texts, psycopg.pq.Escaping(connection.pgconn).escape_literal)
    assert written is not None
    row = connection.execute(f"SELECT CAST({written} AS text[])").fetchone()
    assert row == (texts,)


@pytest.mark.parametrize("value", [[[1]], [1.5], {"a": 1}, 1.5, Decimal("NaN")], ids=repr)
def test_a_kind_the_writer_does_not_know_is_left_to_psycopg(
    connection: psycopg.Connection[tuple[object, ...]], value: object
) -> None:
    escape = psycopg.pq.Escaping(connection.pgconn).escape_literal
    assert literal(value, escape) is None
    assert inline("SELECT %(v)s", {"v": value}, escape) is None


_BOUND_KINDS = [
    ("O'Brien \\ Ünïcødé", ["text", "varchar"]),
    ('{"name": "O\'Brien", "n": [1, 2.5]}', ["json", "jsonb", "text"]),
    (True, ["boolean", "text"]),
    (-42, ["bigint", "integer", "numeric", "text"]),
    (uuid.UUID("0190f0e2-6a3e-7c4d-8b1a-2f3e4d5c6b7a"), ["uuid", "text"]),
    (date(2026, 11, 25), ["date", "timestamptz", "text"]),
    (["a", None, 'q"uote', "back\\slash"], ["text[]", "text"]),
    # An array is one untyped text either way, its elements read by its type's input alike.
    ([datetime(2026, 11, 25, 22, 5, 1, tzinfo=timezone(timedelta(hours=-5)))], ["timestamptz[]"]),
    ([uuid.UUID("0190f0e2-6a3e-7c4d-8b1a-2f3e4d5c6b7a"), None], ["uuid[]"]),
]


@pytest.mark.parametrize(
    ("value", "parameter_type"),
    [(value, kind) for value, kinds in _BOUND_KINDS for kind in kinds],
    ids=repr,
)
def test_a_value_bound_as_a_parameter_reaches_a_prepared_statement_as_its_literal_does(
    connection: psycopg.Connection[tuple[object, ...]], value: object, parameter_type: str
) -> None:
    """Bound (a pipeline) or written into ``EXECUTE`` (a script), the statement gets the same."""
    pgconn = connection.pgconn
    name = f"bound_{uuid.uuid4().hex}"
    sql = "SELECT %(v)s AS v"
    connection.execute(f"PREPARE {name}({parameter_type}) AS SELECT $1::text")
    try:
        bound = parameters(sql, {"v": value})
        assert bound is not None
        given = [each for each in bound if each is not None]  # no NULL here
        assert len(given) == len(bound)
        by_parameter = pgconn.exec_prepared(name.encode(), given)
        call = execute_call(name, sql, {"v": value}, psycopg.pq.Escaping(pgconn).escape_literal)
        assert call is not None
        by_literal = pgconn.exec_(call.encode())
    finally:
        connection.execute(f"DEALLOCATE {name}")

    assert by_parameter.error_message == by_literal.error_message == b""
    assert by_parameter.get_value(0, 0) == by_literal.get_value(0, 0)


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 11, 25, 22, 5, 1, tzinfo=UTC),
        b"bytes",
        psycopg.Binary(b"bytes"),
        Decimal("1E+2"),
        1.5,
    ],
    ids=repr,
)
def test_a_timestamp_bytes_or_a_decimal_are_not_bound_as_parameters(value: object) -> None:
    """Their literals' types convert them (a time zone to the parameter's, ``numeric::text``'s
    own form), which their text as a parameter would not: the statement goes as a script. So
    does a kind no literal is written for."""
    assert parameters("SELECT %(v)s, %(w)s", {"v": "kept", "w": value}) is None


def test_a_text_with_a_nul_is_refused_as_a_parameter_too() -> None:
    with pytest.raises(psycopg.DataError):
        parameters("SELECT %(v)s", {"v": "before\x00after"})


def test_a_uuid_goes_as_its_hex_digits_where_the_statement_casts_it_to_uuid_else_hyphenated() -> (
    None
):
    """Hyphenated, it is what ``uuid::text`` gives a text parameter; cast to ``UUID`` by the
    statement, its 32 hex digits read the same."""
    value = uuid.UUID("0190f0e2-6a3e-7c4d-8b1a-2f3e4d5c6b7a")
    assert parameters("SELECT %(v)s::UUID, %(w)s, %(v)s", {"v": value, "w": value}) == [
        value.hex.encode(),
        str(value).encode(),
    ]
