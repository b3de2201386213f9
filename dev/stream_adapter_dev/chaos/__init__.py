"""Chaos and fuzz runs: prove against a real broker that faults and bad input lose nothing.

`stream-adapter chaos` runs a call mix while it kills workers, restarts the broker and scales
the worker group; `stream-adapter fuzz` floods the inputs with malformed messages. Both report
figures (docs/chaos.md) and are bounded in count and time.
"""
