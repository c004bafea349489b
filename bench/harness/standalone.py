"""A part of `make bench` run on its own (bench/webhooks.py, sync.py, live.py): its report
measured, printed and written, and the exit code saying how it went."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson

from harness.processes import ServiceFailed, stop_on_sigterm
from harness.profiling import ProfileFailed
from harness.settings import SettingsError


class Report(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def failures(self) -> list[str]: ...

    def as_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Report)


@dataclass
class PartsReport:
    """A report of rows in parts (a part: a list of rows, each with a ``name`` and a
    ``failure``), its settings and the load average around it; ``failure`` is one outside the
    rows (the stack, a warm-up). Each script says what its parts are."""

    settings: dict[str, Any] = field(default_factory=dict)
    load_average: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None

    def parts(self) -> dict[str, list[Any]]:
        raise NotImplementedError

    def more(self) -> dict[str, Any]:
        """What the results file holds beside the parts."""
        return {}

    @property
    def failures(self) -> list[str]:
        rows = [row for part in self.parts().values() for row in part]
        found = [f"{row.name}: {row.failure}" for row in rows if row.failure]
        return ([self.failure] if self.failure else []) + found

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "load_average": self.load_average,
            **{name: [asdict(row) for row in rows] for name, rows in self.parts().items()},
            **self.more(),
            "failures": self.failures,
        }


def stamp() -> str:
    """A run's date, as its results' file names carry it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")


def run_alone(
    name: str,
    measure: Callable[[], R],
    tables: Callable[[R], str],
    json_path: Path | None,
) -> int:
    """``measure()``, its ``tables`` printed and, with ``json_path``, its figures written there.
    Exits 0 when the report is ok, 1 when it or a server failed, 2 on a bad setting, 130 when
    interrupted (SIGTERM too: servers stop and scratch databases are dropped on the way out)."""
    stop_on_sigterm()
    try:
        report = measure()
    except SettingsError as exc:
        print(f"bench: {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"bench: {name}: interrupted; servers stopped, scratch database dropped",
            file=sys.stderr,
        )
        return 130
    except (ServiceFailed, ProfileFailed) as exc:
        print(f"bench: {name}: FAILED: {exc}", file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    print()
    print(tables(report))
    if json_path:
        json_path.write_text(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode())
    if not report.ok:
        print(f"\nbench: {name}: FAILED:\n  " + "\n  ".join(report.failures), file=sys.stderr)
        return 1
    return 0
