"""`stream-adapter bench`: the worker measured side by side with what users would pick instead.

One local broker, the same pre-produced envelopes for every contender, in interleaved rounds:
a hand-written aiokafka loop (the Python ceiling), the worker at-least-once and exactly-once,
Quix Streams apps at either guarantee, and `sleep` calls against the ideal
`max_in_flight / seconds`. Figures and ratios are medians of the rounds (summary.py).
"""
