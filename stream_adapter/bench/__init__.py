"""`stream-adapter bench`: the worker measured side by side with what users would pick instead.

One local broker, the same pre-produced envelopes for every contender, one after another:
a hand-written aiokafka loop (the Python ceiling), the worker at-least-once and exactly-once,
a Quix Streams app, and `sleep` calls against the ideal `max_in_flight / seconds`.
"""
