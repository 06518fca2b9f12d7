"""Speaking to a broker from outside, as any Kafka client does: blocking connections
(``connection``) with TLS and SASL done on connect (``security``: the client side of
Kafka's security settings, read from client properties). Uses ``protocol`` only; the
``txbroker`` tools, the Spark data source and the test brokers build on it.
"""
