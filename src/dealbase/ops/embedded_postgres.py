"""A PostgreSQL server of our own (the ``pgserver`` package) for machines that have none."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from dealbase.config import Settings

_servers: dict[Path, Any] = {}
# Where pgserver lists the processes holding a server (it stops the server when the last exits).
_HOLDERS = ".handle_pids.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _forget_dead_holders(folder: Path) -> None:
    """A holder killed before its exit handlers ran stays listed, and the server would then
    outlive every later process: only live processes are kept."""
    holders = folder / _HOLDERS
    if holders.exists():
        listed = json.loads(holders.read_text() or "[]")
        holders.write_text(json.dumps([pid for pid in listed if _alive(pid)]))


def embedded_database_url(data_dir: Path) -> str:
    """Starts (or joins) the server whose data lives in ``data_dir/postgres``; returns its URL.

    The server runs as long as this process holds it; a second process on the same folder shares it.
    """
    folder = (data_dir / "postgres").resolve()
    if folder not in _servers:
        folder.mkdir(parents=True, exist_ok=True)
        _forget_dead_holders(folder)
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime dir, which warns on machines without
            # XDG_RUNTIME_DIR (containers, CI) and then falls back correctly.
            warnings.simplefilter("ignore")
            import pgserver  # late: only machines without a DATABASE_URL pay for it

            _servers[folder] = pgserver.get_server(  # type: ignore[attr-defined]
                folder, cleanup_mode="stop"
            )
    uri: str = _servers[folder].get_uri()
    return uri


def database_url_of(settings: Settings) -> str:
    """``DEALBASE_DATABASE_URL``, else the embedded server's, started (or joined) here."""
    return settings.database_url or embedded_database_url(settings.data_dir)
