"""The egress ledger: one record per connection a command attempted through the proxy.

The records of a call are kept in its result's data under ``egress`` (so they
are stored beside the call in ``call.finished``; a background job's in a
``job.egress`` event of the call that started it, shown by ``zuno show`` and counted in
``call.settled``); :func:`refusal_lines` is what the model reads about the
refused ones, and :func:`suggested_rules` what ``zuno network suggest`` prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "LEDGER_EVENTS",
    "EgressRecord",
    "egress_line",
    "egress_summary",
    "refusal_lines",
    "suggested_rules",
]

LEDGER_EVENTS = ("call.finished", "job.egress")
"""Events whose ``egress`` list holds ledger rows: a call's own (a foreground
command, an interactive process's calls) and a background job's, stored beside
the call that started it when the job ends."""

Verdict = Literal["allowed", "refused", "failed"]
"""``allowed`` (connected), ``refused`` (by a rule) or ``failed`` (allowed, but the
connection or the client's request did not work)."""


@dataclass(slots=True)
class EgressRecord:
    """One connection attempt.

    Attributes:
        host: The host the command asked for (name or address).
        port: The port it asked for.
        protocol: ``http`` (a plain request), ``connect`` (HTTP CONNECT) or ``socks5``.
        decision: See :data:`Verdict`.
        rule: The entry that decided, if any.
        reason: Why it was refused or failed (empty when allowed).
        address: The address connected to (or refused), when resolved.
        bytes_up: Bytes sent to the host.
        bytes_down: Bytes received from the host.
    """

    host: str
    port: int
    protocol: str
    decision: Verdict = "allowed"
    rule: str | None = None
    reason: str = ""
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object."""
        return asdict(self)


def refusal_lines(records: Sequence[EgressRecord]) -> list[str]:
    """One line per distinct refusal reason, in order of first appearance."""
    return list(dict.fromkeys(r.reason for r in records if r.decision == "refused"))


def egress_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Counts of a call's ledger: connections, refused, and bytes each way."""
    return {
        "connections": len(records),
        "refused": sum(1 for r in records if r.get("decision") == "refused"),
        "bytes_up": sum(int(r.get("bytes_up", 0)) for r in records),
        "bytes_down": sum(int(r.get("bytes_down", 0)) for r in records),
    }


def suggested_rules(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """``host:port`` entries of refused connections with their counts, most first."""
    counts = Counter(
        _host(str(r["host"]), r["port"]) for r in records if r.get("decision") == "refused"
    )
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _host(host: str, port: object) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def egress_line(row: Mapping[str, Any]) -> str:
    """One ledger row as ``zuno show`` prints it under its call."""
    where = _host(str(row.get("host")), row.get("port"))
    via = f" via {row['address']}" if row.get("address") else ""
    text = f"{row.get('decision')} {row.get('protocol')} {where}{via}"
    if row.get("decision") == "allowed":
        text += f", {row.get('bytes_up', 0)} B up, {row.get('bytes_down', 0)} B down"
    if row.get("rule"):
        text += f" (rule {row['rule']})"
    if row.get("reason"):
        text += f": {row['reason']}"
    return text
