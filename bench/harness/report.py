"""The table a run prints, the targets, and the results file.

A run measures its scenarios in one or more rounds (``BENCH_ROUNDS``), each round every
selected scenario in order, so that each dealbase scenario and its peer are measured side by
side once a round. A ratio is taken within a round, between the two measured side by side; the
figure the table and the targets give is the median over the rounds (of each ratio, each
p99/p50, each share of lock waits), and the table's other figures are those of each
scenario's median round by requests a second.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.load import Measurement
from harness.scenarios import MAX_LOCK_WAITS, MAX_TAIL, TARGETS, Scenario


@dataclass
class Outcome:
    """A scenario's result: its measurement, or why it has none."""

    scenario: Scenario
    measurement: Measurement | None = None
    failure: str | None = None
    load_average_before: list[float] | None = None
    load_average_after: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.measurement is not None

    @property
    def tail(self) -> float | None:
        m = self.measurement
        return m.p99_ms / m.p50_ms if self.ok and m and m.p50_ms > 0 else None


# Every scenario's outcome in one round.
Round = dict[str, Outcome]


def ratio(outcomes: Round, name: str, other: str) -> float | None:
    mine, theirs = outcomes.get(name), outcomes.get(other)
    if not (mine and theirs and mine.ok and theirs.ok):
        return None
    assert mine.measurement
    assert theirs.measurement
    if theirs.measurement.requests_per_second <= 0:
        return None
    return mine.measurement.requests_per_second / theirs.measurement.requests_per_second


def _median(values: Sequence[float | None]) -> float | None:
    """The median of the values measured (a scenario failed in a round has none there)."""
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


def ratios(rounds: Sequence[Round], name: str, other: str) -> list[float | None]:
    """The ratio in each round."""
    return [ratio(outcomes, name, other) for outcomes in rounds]


def median_ratio(rounds: Sequence[Round], name: str, other: str) -> float | None:
    return _median(ratios(rounds, name, other))


def representative(rounds: Sequence[Round]) -> Round:
    """Each scenario's outcome the table shows: a failed one if it failed in any round (the run
    fails), else its median round by requests a second (the lower of the middle two)."""
    shown: Round = {}
    for name in rounds[0] if rounds else {}:
        outcomes = [outcomes[name] for outcomes in rounds if name in outcomes]
        failed = [outcome for outcome in outcomes if not outcome.ok]
        if failed:
            shown[name] = failed[0]
            continue
        by_rate = sorted(outcomes, key=_requests_per_second)
        shown[name] = by_rate[(len(by_rate) - 1) // 2]
    return shown


def _requests_per_second(outcome: Outcome) -> float:
    assert outcome.measurement
    return outcome.measurement.requests_per_second


def _per_scenario(
    rounds: Sequence[Round], figure: Callable[[Outcome], float | None]
) -> dict[str, float]:
    """``figure``'s median over the rounds, for each scenario that has it in any round."""
    medians: dict[str, float] = {}
    for name in rounds[0] if rounds else {}:
        value = _median([figure(outcomes[name]) for outcomes in rounds if name in outcomes])
        if value is not None:
            medians[name] = value
    return medians


def _number(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def table(rounds: Sequence[Round], seconds: int | None = None) -> str:
    outcomes = representative(rounds)
    header = (
        "| scenario | what | req/s | p50 ms | p99 ms | p99/p50 | errors | lock waits"
        " | CPU µs a request: server, PostgreSQL, Redis | waiting for a core, µs a request:"
        " server, PostgreSQL | WAL a request: records, bytes | checkpoint buffers written"
        " | ratio | to |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    rows = [header]
    for outcome in outcomes.values():
        scenario, m = outcome.scenario, outcome.measurement
        compare = scenario.compare_to
        if outcome.ok and m:
            figures = (
                f"{m.requests_per_second:,.0f} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | "
                f"{_number(outcome.tail, 1)} | {m.errors} | {_lock_waits(outcome)}"
                f" | {_cpu(outcome)} | {_run_queue_wait(outcome)} | {_wal(outcome)}"
                f" | {_checkpoint_writes(outcome)}"
            )
        else:
            errors = m.errors if m else "—"
            figures = f"FAILED | — | — | — | {errors} | — | — | — | — | —"
        ratio_text = _ratio_text(rounds, scenario.name, compare) if compare else "—"
        rows.append(
            f"| {scenario.name} | {scenario.what} | {figures} | {ratio_text} | {compare or ''} |"
        )
    if seconds is not None:
        longer = [
            f"{o.scenario.name} {o.measurement.seconds:.0f} s"
            for o in outcomes.values()
            if o.ok and o.measurement and o.measurement.seconds > seconds + 1
        ]
        if longer:
            rows.append(
                f"\nMeasured longer than {seconds} s, so that each connection completed about ten"
                f" requests: {', '.join(longer)}."
            )
    return "\n".join(rows)


def _ratio_text(rounds: Sequence[Round], name: str, other: str) -> str:
    """The median ratio; with several rounds, each round's after it."""
    text = _number(median_ratio(rounds, name, other))
    if len(rounds) > 1:
        text += f" ({', '.join(_number(each) for each in ratios(rounds, name, other))})"
    return text


def _cpu(outcome: Outcome) -> str:
    """The CPU a request cost the server, PostgreSQL and Redis (harness/cpu.py)."""
    used = outcome.extra.get("cpu_us_per_request")
    if not used:
        return "—"
    return ", ".join(f"{used[party]:,.0f}" for party in ("server", "postgres", "redis"))


def _run_queue_wait(outcome: Outcome) -> str:
    """How long the server's and PostgreSQL's processes waited for a core, a request
    (harness/cpu.py)."""
    waited = outcome.extra.get("run_queue_wait_us_per_request")
    if not waited:
        return "—"
    return ", ".join(f"{waited[party]:,.0f}" for party in ("server", "postgres"))


def _wal(outcome: Outcome) -> str:
    """The WAL records and bytes a request made (harness/wal.py)."""
    written = outcome.extra.get("wal_per_request")
    if not written:
        return "—"
    return f"{written['records']:,.1f}, {written['bytes']:,.0f}"


def _checkpoint_writes(outcome: Outcome) -> str:
    """The buffers checkpoints wrote while the load ran, and how many began then (harness/wal.py):
    a checkpoint's writes and fsyncs compete with the commits' WAL flushes."""
    checkpoints = outcome.extra.get("checkpoints")
    if not checkpoints:
        return "—"
    began = checkpoints["checkpoints_started"]
    text = f"{checkpoints['checkpoint_buffers_written']:,}"
    return f"{text} ({began} began)" if began else text


def _lock_waits(outcome: Outcome) -> str:
    """The share of the active backends' samples that waited on a lock, as a percentage."""
    waits = outcome.extra.get("lock_waits")
    if not waits or waits["share"] is None:
        return "—"
    return f"{waits['share'] * 100:.0f} %"


def targets(rounds: Sequence[Round]) -> list[dict[str, Any]]:
    """Each target's verdict on its figure's median over the rounds (each round's in
    ``rounds``)."""
    checks: list[dict[str, Any]] = []
    for target in TARGETS:
        value = median_ratio(rounds, target.scenario, target.other)
        checks.append(
            {
                "target": target.label,
                "value": value,
                "rounds": ratios(rounds, target.scenario, target.other),
                "met": None if value is None else value >= target.ratio,
            }
        )
    # The tail target is dealbase's: a peer's own tail (the minimal service's, PostGraphile's) is
    # in the table beside it, as a reading of the machine in the same minutes, not judged.
    tails = _per_scenario(
        rounds, lambda outcome: outcome.tail if outcome.scenario.server == "dealbase" else None
    )
    over = {name: tail for name, tail in tails.items() if tail > MAX_TAIL}
    worst = max(tails.items(), key=lambda item: item[1]) if tails else None
    checks.append(
        {
            "target": f"p99 <= {MAX_TAIL:g} x p50 in every dealbase scenario",
            "value": worst[1] if worst else None,
            "worst": worst[0] if worst else None,
            "over": sorted(over),
            "met": None if worst is None else not over,
        }
    )
    shares = _per_scenario(
        rounds,
        lambda outcome: outcome.extra.get("lock_waits", {}).get("share") if outcome.ok else None,
    )
    waiting = {name: share for name, share in shares.items() if share >= MAX_LOCK_WAITS}
    most = max(shares.items(), key=lambda item: item[1]) if shares else None
    checks.append(
        {
            "target": f"lock waits < {MAX_LOCK_WAITS:g} of the samples in every scenario",
            "value": most[1] if most else None,
            "worst": most[0] if most else None,
            "over": sorted(waiting),
            "met": None if most is None else not waiting,
        }
    )
    return checks


def targets_text(checks: list[dict[str, Any]], rounds: int = 1) -> str:
    measured = "in this run" if rounds == 1 else f"in this run, medians of {rounds} rounds"
    lines = [f"Targets (ratios of req/s measured {measured}):"]
    for check in checks:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[check["met"]]
        value = _number(check["value"])
        if "over" in check:
            worst = f"worst {value} ({check['worst']})" if check["worst"] else value
            over = f"; over: {', '.join(check['over'])}" if check["over"] else ""
            lines.append(f"  {check['target']:<52} {worst}{over}  {verdict}")
        else:
            lines.append(f"  {check['target']:<52} {value}  {verdict}")
    return "\n".join(lines)


def scenario_records(rounds: Sequence[Round]) -> list[dict[str, Any]]:
    """Each scenario's figures for the results file: those of its round the table shows, the
    median ratio, and with several rounds every round's record under ``rounds``."""
    records = []
    for name, outcome in representative(rounds).items():
        record = outcome_record(outcome, rounds[0])
        compare = outcome.scenario.compare_to
        record["ratio"] = median_ratio(rounds, name, compare) if compare else None
        if len(rounds) > 1:
            record["rounds"] = [
                outcome_record(outcomes[name], outcomes) for outcomes in rounds if name in outcomes
            ]
        records.append(record)
    return records


def outcome_record(outcome: Outcome, outcomes: Round) -> dict[str, Any]:
    scenario = outcome.scenario
    record: dict[str, Any] = {
        "name": scenario.name,
        "server": scenario.server,
        "what": scenario.what,
        "script": scenario.script,
        "query": scenario.query,
        "compare_to": scenario.compare_to,
        "ratio": ratio(outcomes, scenario.name, scenario.compare_to)
        if scenario.compare_to
        else None,
        "p99_over_p50": outcome.tail,
        "ok": outcome.ok,
        "failure": outcome.failure,
        "load_average_before": outcome.load_average_before,
        "load_average_after": outcome.load_average_after,
        "measurement": outcome.measurement.as_dict() if outcome.measurement else None,
        **outcome.extra,
    }
    return record
