"""OpenTelemetry for the topology: continue a message's `traceparent`, pass it on to the reply.

Off by default (`STREAM_ADAPTER_OTEL_ENABLED`); the flows then hold ``None`` and pay one
``is None`` test per message, and nothing here (or OpenTelemetry) is imported. On, each tool
run gets a span whose parent is the W3C trace context in the consumed message's headers
(`traceparent`, `tracestate`), and the reply carries that span's context in its headers, so an
agent sees its own trace continue through the worker.

The worker installs an SDK tracer provider when none is set (service name = app id), with an
OTLP/HTTP exporter when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces variant) is set and that
exporter is installed. Without the SDK, spans are non-recording and the incoming context is
passed on unchanged. Install with the `otel` extra.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from stream_adapter.core import logs
from stream_adapter.stream.engine import Headers


class Tracing:
    """Spans around tool runs that continue and propagate W3C trace context via headers."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry import propagate, trace

        _install_provider(service_name)
        self._propagate = propagate
        self._trace = trace
        self._tracer = trace.get_tracer("stream_adapter")

    @contextmanager
    def span(
        self, name: str, headers: Mapping[str, bytes] | None, **attributes: Any
    ) -> Iterator[Headers]:
        """A consumer span continuing headers' context; yields the headers to pass it on.

        An AdapterError reported through the reply is not an exception here: callers mark
        failures with `failed`.
        """
        carrier = {}
        for key, value in (headers or {}).items():
            if key in ("traceparent", "tracestate", "baggage"):
                try:
                    carrier[key] = bytes(value).decode("ascii")
                except (UnicodeDecodeError, TypeError):
                    continue
        # Without a carried context, the current span (if any) is the parent.
        parent = self._propagate.extract(carrier) if carrier else None
        kind = self._trace.SpanKind.CONSUMER
        attrs = {k: v for k, v in attributes.items() if v is not None}
        with self._tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attrs):
            out: dict[str, str] = {}
            self._propagate.inject(out)
            yield [(k, v.encode()) for k, v in out.items()]

    def failed(self, kind: str) -> None:
        """Mark the current span as failed with an error kind (never the error's text)."""
        span = self._trace.get_current_span()
        span.set_attribute("error.type", kind)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))


def traceparent(headers: Mapping[str, bytes] | None) -> str | None:
    """The `traceparent` header as text, for carrying it through internal requests."""
    raw = (headers or {}).get("traceparent")
    if raw is None:
        return None
    try:
        return bytes(raw).decode("ascii")
    except (UnicodeDecodeError, TypeError):
        return None


def as_headers(parent: str | None) -> dict[str, bytes]:
    """A carried `traceparent` as consumed-message headers again."""
    return {} if parent is None else {"traceparent": parent.encode()}


def build_tracing(enabled: bool, service_name: str) -> Tracing | None:
    """Tracing when enabled and OpenTelemetry is installed; else None (and a warning)."""
    if not enabled:
        return None
    try:
        return Tracing(service_name)
    except ImportError:
        logs.event(logs.WARNING, "tracing off: opentelemetry is not installed", event="otel")
        return None


def _install_provider(service_name: str) -> None:
    """Give the process an SDK tracer provider unless the host already set one."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return  # API only: non-recording spans, context still passed on
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        except ImportError:
            logs.event(logs.WARNING, "no OTLP exporter installed; spans are not exported")
    trace.set_tracer_provider(provider)
