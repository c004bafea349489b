from __future__ import annotations

import pytest

from dealbase.config import SettingsError, load_settings


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEALBASE_PORT", "eighty"),
        ("DEALBASE_PORT", "70000"),
        ("DEALBASE_LOG_FORMAT", "xml"),
        ("DEALBASE_DATABASE_URL", "mysql://x"),
        ("DEALBASE_REDIS_URL", "http://x"),
        ("DEALBASE_REDIS_URL", "redis://localhost/0?socket_timeout=5"),
        ("DEALBASE_REDIS_URL", "redis://localhost/zero"),
        ("DEALBASE_RATE_LIMIT_AUTH_FAILURES", "often"),
        ("DEALBASE_RATE_LIMIT_AUTH_FAILURES", "0/s"),
        ("DEALBASE_RATE_LIMIT_AUTH_FAILURES_BURST", "0"),
    ],
)
def test_invalid_setting_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError) as raised:
        load_settings()

    message = str(raised.value)
    assert variable in message and "\n" not in message


def test_unset_database_url_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEALBASE_DATABASE_URL", raising=False)

    assert load_settings().database_url is None
