"""deploy/compose.yaml runs the API behind the proxy: the proxy's image pinned and its
configuration the file tests/deploy/test_proxy.py runs, its port the only published one, the API
where that file sends requests, and a stop that lets the proxy drain."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.proxy import CONFIG, directive

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _seconds(value: str) -> int:
    assert value.endswith("s"), value
    return int(value[:-1])


def test_the_proxy_runs_a_pinned_official_image_on_the_shipped_file() -> None:
    proxy = _services()["proxy"]

    assert re.fullmatch(r"nginx:\d+\.\d+\.\d+", proxy["image"]), proxy["image"]
    assert proxy["volumes"] == ["./nginx/nginx.conf:/etc/nginx/nginx.conf:ro"]
    assert (COMPOSE.parent / "nginx" / "nginx.conf") == CONFIG


def test_only_the_proxy_is_published_on_the_port_it_listens_on() -> None:
    published = {
        name: service["ports"] for name, service in _services().items() if "ports" in service
    }

    assert published == {"proxy": ["8000:8000"]}
    assert "8000 default_server" in directive("listen")


def test_the_api_listens_where_the_proxy_sends_requests_and_trusts_it() -> None:
    api = _services()["dealbase"]["environment"]
    (upstream,) = re.findall(r"^\s*server\s+([\w.-]+:\d+);", CONFIG.read_text(), re.MULTILINE)

    assert upstream == f"dealbase:{api['DEALBASE_PORT']}"
    assert f"http://dealbase:{api['DEALBASE_METRICS_PORT']}" in directive("proxy_pass")
    assert "FORWARDED_ALLOW_IPS" in api
    assert _services()["proxy"]["depends_on"]["dealbase"]["condition"] == "service_healthy"


def test_the_proxy_stops_gracefully_within_its_grace_period() -> None:
    proxy = _services()["proxy"]
    (drain,) = directive("worker_shutdown_timeout")

    assert proxy["stop_signal"] == "SIGQUIT"
    assert _seconds(proxy["stop_grace_period"]) > _seconds(drain)
