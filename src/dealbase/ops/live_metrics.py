"""The live subscriptions' Prometheus metrics, in the app's registry (``ops.metrics.Metrics``):
the transports report to them through ``LiveReports``, as the layers below report to
``Metrics``, so that ``graphql_api`` does not import prometheus_client.

Messages sent are counted in plain numbers and written with the requests (``Metrics``'s once a
second and before a scrape): a subscriber's message is the live path's unit, its most
frequent event, and a multiprocess value's increment costs a lock and a write into its file."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from dealbase.graphql_api.live.service import LiveReports
from dealbase.ops.metrics import Metrics


class LiveMetrics:
    def __init__(self, metrics: Metrics) -> None:
        registry = metrics.registry
        self._open = Gauge(
            "dealbase_live_connections",
            "Live connections open (WebSockets and event streams of subscriptions), by"
            " transport, summed over live workers.",
            ["transport"],
            multiprocess_mode="livesum",
            registry=registry,
        )
        self._closed = Counter(
            "dealbase_live_connections_closed",
            "Live connections closed, by transport and why (client: the client closed it;"
            " slow_consumer, idle, no_pong, revoked, shutdown, ...: the server did).",
            ["transport", "reason"],
            registry=registry,
        )
        self._sent = Counter(
            "dealbase_live_messages_sent",
            "Subscription results sent to clients (one per event, or per board update), by"
            " transport.",
            ["transport"],
            registry=registry,
        )
        # Messages sent since they were last written, by transport.
        self._unwritten_sent: dict[str, int] = {}
        metrics.write_also(self.write_counted)

    def reports(self) -> LiveReports:
        return LiveReports(opened=self.opened, closed=self.closed, sent=self.sent)

    def opened(self, transport: str) -> None:
        self._open.labels(transport).inc()

    def closed(self, transport: str, why: str) -> None:
        self._open.labels(transport).dec()
        self._closed.labels(transport, why).inc()

    def sent(self, transport: str) -> None:
        unwritten = self._unwritten_sent
        unwritten[transport] = unwritten.get(transport, 0) + 1

    def write_counted(self) -> None:
        unwritten, self._unwritten_sent = self._unwritten_sent, {}
        for transport, count in unwritten.items():
            self._sent.labels(transport).inc(count)
