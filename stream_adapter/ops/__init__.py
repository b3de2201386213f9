"""Operator commands over Kafka: `call` (request-reply), `dlq list|replay`, `acls`, `mcp`."""
