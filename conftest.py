"""What both suites (tests/ and contract_tests/) share before any test module is imported."""

# The hypothesis profile (CI's depth or a developer's) is loaded here, so that every generated
# test and every schemathesis schema built at import time sees it.
import tests.depth  # noqa: F401
