"""Counters for ``GET /metrics``, in Prometheus' text format.

Per replica: a load balancer's scraper sums them. Cheap to update (plain dict
increments on the event loop thread), rendered only when scraped.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                    for k, v in labels)
    return "{" + body + "}"


def _number(value: float) -> str:
    # Counters are whole numbers: 1234567, never 1.23457e+06.
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    """The proxy's counters and gauges."""

    HELP: ClassVar[dict[str, tuple[str, str]]] = {
        "loopbreak_requests_total": ("counter", "Requests received, by route."),
        "loopbreak_trips_total": ("counter", "Streams cut, by rule and channel."),
        "loopbreak_cut_chars_total": ("counter", "Characters of the channel consumed when cut."),
        "loopbreak_retries_total": ("counter", "Re-sent upstream requests, by reason."),
        "loopbreak_upstream_errors_total": ("counter", "Upstream failures, by kind."),
        "loopbreak_tool_denials_total": ("counter", "Tool calls held back and denied."),
        "loopbreak_stall_reactions_total": ("counter", "Reactions of the rules across calls "
                                           "(stall, monologue), by rule and kind."),
        "loopbreak_streams_active": ("gauge", "Guarded streams open now."),
    }

    def __init__(self) -> None:
        self.values: defaultdict[tuple[str, tuple[tuple[str, str], ...]], float] = \
            defaultdict(float)

    def add(self, name: str, amount: float = 1, **labels: str) -> None:
        self.values[(name, tuple(sorted(labels.items())))] += amount

    def render(self) -> str:
        lines = []
        for name, (kind, text) in self.HELP.items():
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            samples = [(labels, v) for (n, labels), v in sorted(self.values.items()) if n == name]
            if not samples and kind == "gauge":
                samples = [((), 0.0)]
            for labels, value in samples:
                lines.append(f"{name}{_labels(labels)} {_number(value)}")
        return "\n".join(lines) + "\n"
