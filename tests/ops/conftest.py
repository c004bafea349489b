"""Driving the ``dealbase`` command in-process, against the session's real database; and the
pipeline board's browser, server and tabs (``tests/ops/board_browser.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from typer.testing import CliRunner, Result

from dealbase.config import Settings
from dealbase.ops.cli import cli
from tests.ops.board_browser import (
    LOCALE,
    POLL_SECONDS,
    WAIT_MS,
    chromium,
    launched_browser,
    served,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@dataclass(frozen=True)
class CliRun:
    """What one in-process run of ``dealbase`` left behind."""

    args: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    def __str__(self) -> str:
        return (
            f"dealbase {' '.join(self.args)} -> exit {self.exit_code}, "
            f"exception {self.exception!r}\nstdout: {self.stdout!r}\nstderr: {self.stderr!r}"
        )

    def json(self) -> Any:
        """The one JSON value on stdout; fails when the command failed or printed anything else."""
        assert self.exit_code == 0, str(self)
        return json.loads(self.stdout)

    @property
    def crashed(self) -> bool:
        """An exception escaped the command (a terminal would show a traceback)."""
        return self.exception is not None and not isinstance(self.exception, SystemExit)


def invoke_cli(args: tuple[str, ...], env: Mapping[str, str | None]) -> CliRun:
    """Runs the Typer app in-process with ``env`` added to the environment.

    The commands configure structlog to print to the runner's (soon closed) stderr; the
    configuration is put back afterwards so later tests keep logging to a live stream.
    """
    saved_logging = structlog.get_config()
    try:
        result: Result = CliRunner().invoke(cli, list(args), env=dict(env))
        return CliRun(args, result.exit_code, result.stdout, result.stderr, result.exception)
    finally:
        structlog.configure(**saved_logging)


RunCli = Callable[..., CliRun]


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str | None]:
    return {
        "DEALBASE_DATABASE_URL": database_url,
        "DEALBASE_DATA_DIR": str(tmp_path / "cli-data"),
        "DEALBASE_LOG_LEVEL": "warning",
        "DEALBASE_REDIS_URL": None,
        "DEALBASE_PORT": None,
    }


@pytest.fixture
def run_cli(cli_env: dict[str, str | None]) -> RunCli:
    """``run_cli("tenant", "create", "x", env={...})`` runs ``dealbase tenant create x``."""

    def run(*args: str, env: Mapping[str, str | None] | None = None) -> CliRun:
        return invoke_cli(args, {**cli_env, **(env or {})})

    return run


# The pipeline board in a browser.


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_browser(chromium()) as launched:
        yield launched


@pytest.fixture(scope="module")
def board_url(settings: Settings) -> Iterator[str]:
    with served(settings.model_copy(update={"live_poll_seconds": POLL_SECONDS})) as base_url:
        yield base_url


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[[], Page]]:
    """A new tab, each in a browser context of its own (its own session storage), closed after
    the test."""
    contexts = []

    def open_one() -> Page:
        # In UTC, so that a timestamp shows the hour it was written with.
        context = browser.new_context(locale=LOCALE, timezone_id="UTC")
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        return context.new_page()

    yield open_one
    for context in contexts:
        context.close()
