"""The engine: the worker, the executor, the attempt (the one door of a running body),
its journal and suspension, settling, group commit, leases and the scheduler.

May import definitions, seams and codec; never the SQL layer (a store is reached
through the seams), the primitives or the caller's side.
"""
