"""The secured variant of ``make demo`` (``--secure``, ``make demo SECURE=1``).

A broker with only a SASL_SSL listener (a throwaway CA and server certificate, made by
the test helpers' trustme), SCRAM-SHA-256 users with random passwords, and Kafka's
StandardAuthorizer. Each part of the pipeline is its own principal holding only the
ACLs it needs (docs/security.md, "A transactional application"); ``User:mallory`` holds
none, and the checks show what she is refused.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from txbroker.spark_jobs.payments.pipeline import PipelineConfig
from txbroker.spark_jobs.payments.verify import Check
from txbroker.testing import BrokerProcess

LISTENER = "SASL_SSL"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PRINCIPALS = ("admin", "shop", "app", "spark", "mallory")


def say(label: str, text: str) -> None:
    """One line of the demo's report: a label column, then the text."""
    print(f"{label:<10} {text}", flush=True)


class SecureDemo:
    def __init__(self, workdir: Path, config: PipelineConfig) -> None:
        self.config = config
        self.users = {name: secrets.token_urlsafe(12) for name in PRINCIPALS}
        self.broker = BrokerProcess(
            str(workdir / "data"),
            {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"},
            listeners=[LISTENER], users=self.users, sasl_mechanisms=("SCRAM-SHA-256",))

    def client(self, user: str) -> dict[str, str]:
        """librdkafka properties for ``user`` over SASL_SSL (no bootstrap.servers)."""
        config = self.broker.client_config(LISTENER, user)
        config.pop("bootstrap.servers")
        return config

    def clients(self) -> dict[str, dict[str, str]]:
        return {"admin": self.client("admin"), "generator": self.client("shop"),
                "processor": self.client("app")}

    def acls(self) -> list:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        c = self.config

        def allow(principal, rtype, name, op, pattern=ResourcePatternType.LITERAL):
            return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op,
                              AclPermissionType.ALLOW)

        topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
        read, write = AclOperation.READ, AclOperation.WRITE
        return [
            allow("shop", topic, c.orders_topic, write),
            # The processor: docs/security.md's "A transactional application".
            allow("app", txn, c.transactional_id, write),
            allow("app", topic, c.payments_topic, write),
            allow("app", topic, c.rejected_topic, write),
            allow("app", topic, c.orders_topic, read),
            allow("app", group, c.group, read),
            allow("spark", topic, c.payments_topic, read),
            allow("spark", topic, c.rejected_topic, read),
            # The demo's own read_committed/read_uncommitted counts (confluent-kafka
            # consumers in groups reader-<random>).
            allow("spark", group, "reader-", read, ResourcePatternType.PREFIXED),
        ]

    def grant(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, **self.client("admin")})
        acls = self.acls()
        for future in admin.create_acls(acls, request_timeout=30).values():
            future.result()
        say("security", f"SASL_SSL only (TLS with a throwaway CA, SCRAM-SHA-256); users "
                         f"{', '.join(PRINCIPALS)}; StandardAuthorizer, super user admin")
        say("", f"{len(acls)} ACLs: shop writes {self.config.orders_topic}; app has the "
                 "transactional application's ACLs; spark reads the outputs; mallory: none")

    def attacks(self, bootstrap: str) -> list[Check]:
        """What mallory (authenticated, no ACL) is refused, as her clients report it."""
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient

        c = self.config
        mallory = {"bootstrap.servers": bootstrap, **self.client("mallory")}
        fence = Producer({**mallory, "transactional.id": c.transactional_id})
        try:
            fence.init_transactions(15)
            fenced = "allowed"
        except KafkaException as e:
            fenced = e.args[0].name()
        errors: list = []
        forger = Producer({**mallory, "message.timeout.ms": 10000})
        forger.produce(c.payments_topic, b"forged", on_delivery=lambda err, _m: errors.append(err))
        forger.flush(15)
        forged = errors[0].name() if errors and errors[0] is not None else "written"
        seen = set(AdminClient(mallory).list_topics(timeout=15).topics)
        hidden = {c.orders_topic, c.payments_topic, c.rejected_topic}
        say("mallory", f"init_transactions({c.transactional_id}): {fenced}; produce to "
                        f"{c.payments_topic}: {forged}; topics she sees: {sorted(seen) or 'none'}")
        return [
            Check("an unauthorized principal cannot fence the processor's transactional.id",
                  fenced == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", fenced),
            Check("an unauthorized principal cannot write the payments",
                  forged == "TOPIC_AUTHORIZATION_FAILED", forged),
            Check("Metadata hides the topics an unauthorized principal may not describe",
                  not seen & hidden, f"{len(seen & hidden)} of {len(hidden)} visible"),
        ]

    def spark_options(self) -> dict[str, str]:
        """Spark's option names (kafka.*), as Spark's Kafka source takes them too."""
        return {
            "kafka.security.protocol": LISTENER,
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required username="spark" '
                                      f'password="{self.users["spark"]}";',
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": self.broker.certs.ca_file,
        }
