"""Kafka's security model in the broker: TLS listeners and principals (tls.py), SASL
mechanisms (sasl.py), SCRAM credentials in the data directory (scram_credentials.py),
ACLs and the authorization decision (authorizer.py) and their durable file
(acl_store.py). docs/security.md is the user's side of it."""
