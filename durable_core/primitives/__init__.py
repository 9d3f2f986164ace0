"""What a workflow body calls: steps, sleeps and messages, events, streams, updates,
patches.

Each is a function that finds the running attempt (``runtime.context``) and asks it,
the one door of a running body; outside a body, the caller's half of streams and
updates reads the store. May import definitions, seams, codec and runtime, never
the caller's side.
"""
