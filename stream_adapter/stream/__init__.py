"""The Kafka topology: the tool-call and approval flows, on the engine (engine/)."""
