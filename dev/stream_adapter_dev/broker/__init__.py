"""A local Apache Kafka broker for development and tests (no Docker needed)."""
