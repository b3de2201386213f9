"""The Kafka topology layer: Faust app, agents, topics. The only place Faust is imported."""
