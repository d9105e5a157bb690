"""Events: their JSON form, the outbox relay, the Kafka consumer, the bus."""
