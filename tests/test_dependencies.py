"""pyproject.toml: each runtime dependency is bounded above by the range it is tested with, so
that `make lock` can only move within it (pyproject.toml's comment says how the bounds are
chosen); certifi's CA bundle excepted, where newer is safer."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
UNBOUNDED_ON_PURPOSE = {"certifi"}


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    unbounded = [
        text
        for text in declared
        if (requirement := Requirement(text)).name not in UNBOUNDED_ON_PURPOSE
        and not any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier)
    ]

    assert unbounded == []
