"""Observers built on the hooks: OpenTelemetry traces and Prometheus metrics.

Each is an optional plugin (``durable_core[otel]``, ``durable_core[metrics]``),
registered by its ``instrument()``. May import the caller and every part below it;
the CLI and the dashboard import the metrics module to serve ``/metrics``.
"""
