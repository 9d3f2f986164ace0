"""What a user declares: workflows and their registry, queues, retry policies, schedules.

Plain definitions with no I/O. May import only ``errors`` and ``durations``.
"""
