"""The caller's side: starting, reading and steering workflows from outside them.

:class:`~durable_core.caller.client.DurableClient` and its handles, the blocking
:class:`~durable_core.caller.sync.SyncClient`, the schedule and on-call methods, and
opening a store by URL. May import every part below it (definitions, seams, codec,
sql, runtime, primitives); nothing below imports it.
"""
