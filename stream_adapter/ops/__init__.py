"""Operator tools over Kafka: request-reply calls and dead-letter inspection and replay."""
