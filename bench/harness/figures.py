"""Figures from samples, as every script reports them: percentiles, milliseconds, and numbers
as the tables print them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The sample at ``fraction`` of ``ordered`` (sorted, not empty), by the nearest rank below:
    a sample that was measured, never one interpolated between two."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def percentiles(
    values: Iterable[float], fractions: Sequence[float] = (0.5, 0.95, 0.99), digits: int = 2
) -> dict[str, float | int]:
    """``count``, a ``p<n>`` for each fraction and ``max`` of ``values``, rounded; only
    ``count`` when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    figures: dict[str, float | int] = {"count": len(ordered)}
    for fraction in fractions:
        figures[f"p{round(fraction * 100):d}"] = round(percentile(ordered, fraction), digits)
    figures["max"] = round(ordered[-1], digits)
    return figures


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def number(value: float | None, digits: int = 0) -> str:
    """A table's cell: thousands separated, or a dash for a figure not measured."""
    return "—" if value is None else f"{value:,.{digits}f}"
