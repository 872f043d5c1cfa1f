"""OpenTelemetry spans: one per call attempt, one per agent turn and model request.

Zuno speaks only ``opentelemetry-api``. Nothing is recorded unless the program
that runs Zuno installed a tracer provider (``opentelemetry-sdk`` or another
implementation): without one every function here returns at once, and
``opentelemetry`` is not even imported unless something else imported it
first (a provider cannot have been installed otherwise) or
``OTEL_PYTHON_TRACER_PROVIDER`` names one to load.

A call's span starts when its ``started`` row is written, is current while
the tool runs (a child agent's turn under ``task`` nests under it), and ends
when its row is settled, with the row's own times (``started_at``,
``finished_at``): a span and ``zuno show`` never disagree. A call blocked
before it ran has a span of no length, made from its row. The parent is the
span current in the caller's context: the agent's turn span
(:func:`turn_span`) in ``zuno run``, or whatever span the embedding program
has open around ``Runtime.dispatch``.

Span names and attributes:

- ``zuno.call TOOL``: ``zuno.contract.tool``, ``zuno.effect``, ``zuno.replay``,
  ``zuno.concurrency`` (the declaration, absent for an unknown tool),
  ``zuno.outcome``, ``zuno.block_kind`` (blocked calls), ``zuno.attempt``,
  ``zuno.session_id``, ``zuno.call_id``, ``zuno.step``, ``zuno.index``,
  ``zuno.mode`` (when the row has one). Status ERROR for ``error`` and
  ``uncertain`` outcomes, with the row's reason.
- ``zuno.turn AGENT``: ``zuno.session_id``, ``zuno.agent``, ``zuno.model``,
  ``zuno.depth``; at its end ``zuno.turn.status`` and ``zuno.turn.steps``.
- ``zuno.model MODEL`` around each model request: ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens`` as
  reported, and ``zuno.cost_usd`` when the model's price is known.

A failure inside telemetry is logged once and never reaches the call.

The ``zuno`` command installs a provider itself only when asked to, through
the standard variables: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set and ``zuno[otel]`` installed, its
spans go to that collector over OTLP/HTTP (:func:`export_from_environment`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Generator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from zuno.core.installed import installed_version

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from zuno.durability.store.records import CallRecord

__all__ = [
    "RunningCall",
    "SpanHandle",
    "call_running",
    "call_span",
    "export_from_environment",
    "model_span",
    "tracing_enabled",
    "turn_span",
]

_SCOPE = "zuno"
_log = logging.getLogger("zuno.durability.telemetry")
_warned: list[bool] = []

_ERROR_OUTCOMES = frozenset({"error", "uncertain"})


def _tracer() -> Tracer | None:
    """The tracer of the installed provider, or None when none is installed.

    Cheap when tracing is off: a look in ``sys.modules`` and the environment.
    """
    if "opentelemetry.trace" not in sys.modules and not os.environ.get(
        "OTEL_PYTHON_TRACER_PROVIDER"
    ):
        return None  # nothing imported the API, so no provider can be installed
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer(_SCOPE, installed_version())


def tracing_enabled() -> bool:
    """Whether a tracer provider is installed (spans are being made)."""
    try:
        return _tracer() is not None
    except Exception:  # a broken provider: Zuno runs without telemetry
        return False


def _failed(what: str, exc: Exception) -> None:
    if not _warned:
        _warned.append(True)
        _log.warning(
            "zuno: telemetry failed while %s (%s: %s); continuing", what, type(exc).__name__, exc
        )


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1_000_000_000)


class RunningCall:
    """The span of a call attempt while its tool runs (inert when tracing is off).

    Current during the run (:meth:`current`), so what the tool does (a child
    agent's turn) nests under it; ended by :func:`call_span` with the row.
    """

    def __init__(self, span: Span | None) -> None:
        self.span = span

    @contextmanager
    def current(self) -> Generator[None]:
        """Make the span current for the block (the tool's run)."""
        if self.span is None:
            yield
            return
        from opentelemetry import trace

        # The row, not an exception, says how the call ended: the status is set from it.
        with trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield


_INERT = RunningCall(None)


def call_running(record: CallRecord) -> RunningCall:
    """Start the span of a call attempt whose ``started`` row was just written."""
    try:
        tracer = _tracer()
        if tracer is None:
            return _INERT
        span = tracer.start_span(
            f"zuno.call {record.tool}",
            attributes=_call_attributes(record),
            start_time=_ns(record.started_at),
        )
        return RunningCall(span)
    except Exception as exc:
        _failed("starting a call span", exc)
        return _INERT


def call_span(record: CallRecord, running: RunningCall | None = None) -> None:
    """End the span of one settled call attempt (its row: outcome and times set).

    ``running``: the span started by :func:`call_running`; without one (a call
    blocked before it ran) a span is made from the row's own times.
    """
    try:
        span = running.span if running is not None else None
        if span is None:
            tracer = _tracer()
            if tracer is None:
                return
            span = tracer.start_span(
                f"zuno.call {record.tool}",
                attributes=_call_attributes(record),
                start_time=_ns(record.started_at),
            )
        _end_call(span, record)
    except Exception as exc:
        _failed("recording a call span", exc)


def _end_call(span: Span, record: CallRecord) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes(_call_attributes(record))
    if record.outcome in _ERROR_OUTCOMES:
        span.set_status(Status(StatusCode.ERROR, record.reason or record.outcome))
    span.end(end_time=_ns(record.finished_at))


def _call_attributes(record: CallRecord) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "zuno.contract.tool": record.tool,
        "zuno.session_id": record.session_id,
        "zuno.call_id": record.call_id,
        "zuno.attempt": record.attempt,
        "zuno.step": record.step,
        "zuno.index": record.index,
    }
    if record.status == "finished":
        attributes["zuno.outcome"] = record.outcome or "uncertain"
    optional = {
        "zuno.effect": record.effect,
        "zuno.replay": record.replay,
        "zuno.concurrency": record.concurrency,
        "zuno.block_kind": record.block_kind,
        "zuno.mode": getattr(record, "mode", None),
    }
    attributes.update({k: str(v) for k, v in optional.items() if v is not None})
    return attributes


class SpanHandle:
    """A span that may be absent (tracing off): attributes set on it are then dropped."""

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Set the attributes whose value is not None."""
        if self._span is None:
            return
        try:
            for key, value in attributes.items():
                if value is not None:
                    self._span.set_attribute(key, value)
        except Exception as exc:
            _failed("setting span attributes", exc)

    def error(self, message: str) -> None:
        """Mark the span as failed, with why."""
        if self._span is None:
            return
        try:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, message))
        except Exception as exc:
            _failed("setting a span status", exc)


@contextmanager
def _current(name: str, attributes: Mapping[str, Any]) -> Generator[SpanHandle]:
    """A span current for the block (its children nest under it); inert without a tracer."""
    try:
        tracer = _tracer()
    except Exception as exc:
        _failed("starting a span", exc)
        tracer = None
    if tracer is None:
        yield SpanHandle(None)
        return
    values = {k: v for k, v in attributes.items() if v is not None}
    # The API ends the span and records an escaping exception (cancellation too).
    with tracer.start_as_current_span(name, attributes=values) as span:
        yield SpanHandle(span)


def turn_span(
    session_id: str, agent: str, model: str, depth: int
) -> AbstractContextManager[SpanHandle]:
    """The span of one agent turn (a context manager yielding a :class:`SpanHandle`)."""
    return _current(
        f"zuno.turn {agent}",
        {
            "zuno.session_id": session_id,
            "zuno.agent": agent,
            "zuno.model": model,
            "zuno.depth": depth,
        },
    )


def model_span(session_id: str, model: str, step: int) -> AbstractContextManager[SpanHandle]:
    """The span of one model request (a context manager yielding a :class:`SpanHandle`)."""
    return _current(
        f"zuno.model {model}",
        {"zuno.session_id": session_id, "zuno.step": step, "gen_ai.request.model": model},
    )


_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def export_from_environment() -> Callable[[], None] | None:
    """Export spans over OTLP/HTTP when the standard variables ask for it (the CLI's setup).

    Nothing happens unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (then not with
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``, nor when a
    provider is installed already, as ``opentelemetry-instrument`` does). The
    exporter reads its other settings (headers, timeout) from the environment.

    Returns:
        A function that sends the spans still queued and stops the exporter
        (call it before exiting), or None when nothing was set up.
    """
    env = os.environ
    if not any(env.get(name) for name in _ENDPOINTS):
        return None
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        _log.warning(
            "zuno: OTEL_EXPORTER_OTLP_ENDPOINT is set, but the OpenTelemetry SDK and its "
            "OTLP exporter are not installed, so no spans are sent; install them with "
            "pip install 'zuno[otel]'"
        )
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # the program was started with a provider of its own
    named = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "zuno"}
    provider = TracerProvider(resource=Resource.create(named))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider.shutdown
