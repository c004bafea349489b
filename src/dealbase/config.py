"""Settings, read once from the environment (prefix ``DEALBASE_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEALBASE_", extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None,
        description="postgresql:// URL; unset starts an embedded PostgreSQL under data_dir.",
    )
    database_listen_url: str | None = Field(
        default=None,
        description=(
            "A direct (not pgbouncer transaction-mode) URL for LISTEN, which key revocation"
            " relies on; unset: database_url."
        ),
    )
    data_dir: Path = Field(
        default=Path(".dealbase"), description="Embedded PostgreSQL and demo files."
    )
    redis_url: str | None = Field(default=None, description="redis:// URL; optional.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_max_overflow: int = Field(default=10, ge=0, le=200)
    migrate_concurrency: int = Field(default=4, ge=1, le=64)
    graphql_introspection: bool = Field(default=True, description="Schema introspection on.")
    graphql_ide: bool = Field(default=True, description="The GraphiQL page at GET /graphql.")
    graphql_max_depth: int = Field(default=10, ge=2, le=50)
    graphql_max_aliases: int = Field(default=15, ge=0, le=1000)
    graphql_max_tokens: int = Field(default=2000, ge=100, le=100_000)
    graphql_max_cost: int = Field(
        default=50_000, ge=100, description="Budget of the estimated cost of one query."
    )

    @field_validator("database_url", "database_listen_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value


class SettingsError(Exception):
    """Settings that cannot start the service; the message names the setting in one line."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "DEALBASE_" + "_".join(str(part) for part in first["loc"]).upper()
        raise SettingsError(f"invalid setting {name}: {first['msg']}") from None
