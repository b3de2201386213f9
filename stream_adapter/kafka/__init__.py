"""Kafka clients as the whole project makes them, outside the Faust engine.

- `clients`: every producer, consumer and admin client, built from `Settings`;
- `codecs`: the compression codecs, checked before any client runs;
- `connectivity`: the broker's reachability as a state, logged once per change;
- `partitions`: Kafka's default partitioner (murmur2), as librdkafka and Java pick;
- `topic`: clients that start or say why not, a topic's partitions, reading a topic to its end.
"""
