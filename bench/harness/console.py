"""What a benchmark prints as it goes: one line a step, named by its script, flushed at once so
that a log read while it runs shows where it is."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def sayer(prefix: str) -> Callable[[str], None]:
    """A function printing ``<prefix>: <message>``."""

    def say(message: str) -> None:
        print(f"{prefix}: {message}", flush=True)

    return say


def arguments_parser(doc: str | None, epilog: str | None = None) -> argparse.ArgumentParser:
    """A script's command line, its ``--help`` opening with its docstring's first paragraph."""
    return argparse.ArgumentParser(
        description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )
