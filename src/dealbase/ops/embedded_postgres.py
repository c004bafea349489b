"""A PostgreSQL server of our own (the ``pgserver`` package) for machines that have none."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

_servers: dict[Path, Any] = {}


def embedded_database_url(data_dir: Path) -> str:
    """Starts (or joins) the server whose data lives in ``data_dir/postgres``; returns its URL.

    The server runs as long as this process holds it; a second process on the same folder shares it.
    """
    folder = (data_dir / "postgres").resolve()
    if folder not in _servers:
        folder.mkdir(parents=True, exist_ok=True)
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
