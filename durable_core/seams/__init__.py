"""The seams: the records that cross them, the store's roles (protocols, one per job, in
``roles.py``; their union ``Store`` in ``store.py``), the hook specifications, the event
records hooks receive (``events.py``) and the plugin manager that loads backends and
observers.

What a backend or an observer implements. May import only ``errors``,
``durations``, ``redaction`` and definitions.
"""
