"""The ``txbroker`` command's subcommands (topics, groups, transactions, users, acls)
and the wire clients they share (admin_client, cluster_client). Tools are clients:
they import ``txbroker.protocol`` and nothing of the broker, so they work against any
Kafka cluster (docs/tools.md). The dispatcher is ``txbroker/cli.py``."""
