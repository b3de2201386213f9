"""Hosts of the core other than the Kafka worker: function hosts, queues, HTTP and shared stores.

- `handler`: one envelope or decision, broker-agnostic; `backend`: the executor a host builds;
- `serverless`, `events`: function-host entry points and their event documents;
- `dead_letters`, `sqs_dead_letters`: failures retrying cannot help, kept aside;
- `pubsub`: Pub/Sub push authentication; `http/`: the tool server; `stores/`: approval stores.
"""
