"""Observers built on the hooks: OpenTelemetry traces and Prometheus metrics.

Each is an optional plugin (``durable_core[otel]``, ``durable_core[metrics]``),
registered by its ``instrument()``. May import every other part; none imports them.
"""
