"""When an offset may be committed: the commit rule, in one folder.

- offsets.py: a partition commits the end of the run of acked offsets at its head, so a
  commit never passes an unfinished message (offsets never delivered count as done).
- gate.py: exactly once, a commit covers a message's outputs and its offset, or neither.
- transactions.py: exactly once, a partition's transaction commits whole with its offsets,
  or is aborted and its messages redone from the committed offset.

The consumer (engine/consumer.py) also commits the running jobs' offsets before it gives a
partition up at a rebalance (`on_partitions_revoked`), and acks a job's message only once its
outputs are acknowledged (engine/routes.py, engine/producer.py).
"""
