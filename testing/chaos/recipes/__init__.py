"""Exactly-once consume-transform-produce pipelines, one per client, that pass
``txbroker chaos`` (docs/testing-your-pipeline.md, "Recipes"): start from the one for
your client. The Java and KafkaJS recipes live in tests/jvm/chaos/ and tests/kafkajs/
(they need a JVM or Node)."""
