"""How deep the generated tests search: one profile for CI, a quicker one for a developer's run.

CI is the gate: its profile keeps the example counts the suites were tuned to there (the
isolation fuzz's 100 interleavings, 25 schemathesis examples a REST operation and 20 a GraphQL
root field, 15 chains of calls). A developer's ``make test`` runs the same tests with fewer
examples of each, so it stays a few minutes on two cores; a run that should search deeper names
a profile: ``HYPOTHESIS_PROFILE=ci make test`` (what CI runs) or ``HYPOTHESIS_PROFILE=deep``
(four times CI).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hypothesis import HealthCheck, settings


@dataclass(frozen=True)
class Depth:
    name: str
    # Examples of a plain hypothesis test (the isolation fuzz's interleavings).
    examples: int
    # schemathesis's fuzzing phase, per REST operation and per GraphQL root field (its examples
    # and coverage phases run whole whatever the profile: the document bounds them).
    examples_per_operation: int
    examples_per_root_field: int
    # The stateful phase: sequences of calls along the document's links.
    stateful_sequences: int


DEPTHS = {
    depth.name: depth
    for depth in (
        Depth(
            "dev", 30, examples_per_operation=10, examples_per_root_field=8, stateful_sequences=6
        ),
        Depth(
            "ci", 100, examples_per_operation=25, examples_per_root_field=20, stateful_sequences=15
        ),
        Depth(
            "deep",
            400,
            examples_per_operation=100,
            examples_per_root_field=80,
            stateful_sequences=60,
        ),
    )
}


def _chosen() -> Depth:
    name = os.environ.get("HYPOTHESIS_PROFILE") or (
        "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
    )
    if name not in DEPTHS:
        raise RuntimeError(f"HYPOTHESIS_PROFILE={name!r}: the profiles are {', '.join(DEPTHS)}")
    return DEPTHS[name]


DEPTH = _chosen()

# What judges the machine's speed rather than the code: no profile has a deadline or a check of
# how long generating an example took, so a busy machine fails no generated test. A test whose
# assertion is a duration sets its own deadline.
_SPEED_CHECKS = [HealthCheck.too_slow]

for _depth in DEPTHS.values():
    # No example database: a run depends on the commit and the profile alone (a failure in CI
    # reproduces by rerunning the same commit), not on what earlier runs found.
    settings.register_profile(
        _depth.name,
        max_examples=_depth.examples,
        database=None,
        deadline=None,
        suppress_health_check=_SPEED_CHECKS,
    )
settings.load_profile(DEPTH.name)

# For a test whose function-scoped fixtures (a tenant, an app) serve all of its examples: a
# decorator, or the parent of a test's own settings (``settings(SHARED_FIXTURES, ...)``).
SHARED_FIXTURES = settings(
    suppress_health_check=[*_SPEED_CHECKS, HealthCheck.function_scoped_fixture]
)
