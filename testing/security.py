"""A secured test broker: throwaway certificates, listeners, users, client settings.

Used by BrokerThread, BrokerProcess and the pytest fixture when they are given
``listeners`` (e.g. ``["PLAINTEXT", "SASL_SSL"]`` or ``{"EXTERNAL": "SASL_SSL"}``) and
``users`` (``{"alice": "alice-secret"}``: SCRAM-SHA-256/512 credentials in the data
directory, and PLAIN users of every SASL listener). Certificates come from ``trustme``
(the ``test`` extra): a CA, the broker's certificate for localhost/127.0.0.1, and
client certificates on request.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence

from txbroker.broker.security import scram_credentials

DEFAULT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Principals of client certificates in tests: the certificate's CN (User:<CN>).
CN_PRINCIPAL_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plain_jaas_config(users: Mapping[str, str]) -> str:
    """PlainLoginModule's JAAS text with one user_<name>="<password>" per user."""
    entries = " ".join(f"user_{name}={_jaas_quote(pw)}" for name, pw in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


class TestCertificates:
    """A CA and certificates in ``directory`` (PEM files), made with trustme."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str) -> None:
        try:
            import trustme
        except ImportError:  # pragma: no cover - the test extra installs it
            raise RuntimeError("a TLS test broker makes its certificates with trustme, which is "
                               "not installed: pip install 'txbroker[tls]'") from None
        self._trustme = trustme
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.ca = trustme.CA(organization_name="txbroker test CA")
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("localhost", "127.0.0.1", "::1", common_name="localhost",
                                    organization_name="txbroker", organization_unit_name="broker")
        self.server_keystore = self._write("server.pem", server.private_key_and_cert_chain_pem.bytes())
        self.client_cert_file, self.client_key_file = self.client_certificate("client")
        self._untrusted_ca = None

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def client_certificate(self, common_name: str, *, expired: bool = False,
                           untrusted: bool = False) -> tuple[str, str]:
        """(certificate file, key file) of a client certificate with subject
        ``CN=<common_name>,OU=clients,O=txbroker``; ``expired``: it expired yesterday;
        ``untrusted``: issued by another CA than the broker trusts."""
        ca = self.ca
        if untrusted:
            if self._untrusted_ca is None:
                self._untrusted_ca = self._trustme.CA(organization_name="some other CA")
            ca = self._untrusted_ca
        now = datetime.datetime.now(datetime.UTC)
        kwargs = {"not_before": now - datetime.timedelta(days=3),
                  "not_after": now - datetime.timedelta(days=1)} if expired else {}
        # One subjectAltName entry, as Kafka's own test certificates have (DNS:localhost):
        # cryptography 51 refuses a certificate whose SAN extension is empty, which is what
        # trustme writes when it is given no identity. The principal comes from the subject.
        cert = ca.issue_cert("localhost", common_name=common_name, organization_name="txbroker",
                             organization_unit_name="clients", **kwargs)
        tag = common_name + ("-expired" if expired else "") + ("-untrusted" if untrusted else "")
        return (self._write(f"{tag}.crt", b"".join(b.bytes() for b in cert.cert_chain_pems)),
                self._write(f"{tag}.key", cert.private_key_pem.bytes()))


class SecuritySetup:
    """The broker config and data-directory contents of a secured test broker."""

    def __init__(self, data_dir: str, listeners: Sequence[str] | Mapping[str, str],
                 users: Mapping[str, str] | None = None, *, host: str = "127.0.0.1",
                 sasl_mechanisms: Sequence[str] = DEFAULT_MECHANISMS,
                 ssl_client_auth: str = "requested",
                 principal_mapping_rules: str = CN_PRINCIPAL_RULES) -> None:
        self.listeners = (dict(listeners) if isinstance(listeners, Mapping)
                          else {name: name for name in listeners})
        self.users = dict(users or {})
        self.data_dir = data_dir
        self.host = host
        self.sasl_mechanisms = tuple(sasl_mechanisms)
        self.ssl_client_auth = ssl_client_auth
        self.principal_mapping_rules = principal_mapping_rules
        uses_tls = any(p in TLS_PROTOCOLS for p in self.listeners.values())
        self.certs = TestCertificates(os.path.abspath(data_dir) + "-tls") if uses_tls else None

    def overrides(self, ports: Mapping[str, int] | None = None) -> dict[str, str]:
        ports = ports or {}
        out = {
            "listeners": ",".join(f"{name}://{self.host}:{ports.get(name, 0)}" for name in self.listeners),
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in self.listeners.items()),
        }
        if self.certs is not None:
            out.update({
                "ssl.keystore.type": "PEM", "ssl.keystore.location": self.certs.server_keystore,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": self.certs.ca_file,
                "ssl.client.auth": self.ssl_client_auth,
                "ssl.principal.mapping.rules": self.principal_mapping_rules,
            })
        if any(p.startswith("SASL_") for p in self.listeners.values()):
            out["sasl.enabled.mechanisms"] = ",".join(self.sasl_mechanisms)
            if self.users:
                out["sasl.jaas.config"] = plain_jaas_config(self.users)
        return out

    def prepare_data_dir(self) -> None:
        """SCRAM credentials of ``users`` (both mechanisms), as `kafka-storage format
        --add-scram` would put them in before the first start."""
        if self.users:
            scram_credentials.add_users(self.data_dir, self.users)

    def client_config(self, bootstrap: str, listener: str, user: str | None = None,
                      mechanism: str = "SCRAM-SHA-256", password: str | None = None,
                      client_certificate: bool = False) -> dict[str, str]:
        """Client properties in Kafka's / librdkafka's names (confluent-kafka takes them
        as they are): security.protocol, sasl.*, ssl.ca.location, ssl.certificate.location,
        ssl.key.location."""
        protocol = self.listeners[listener]
        config = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
        if protocol.startswith("SASL_"):
            user = user if user is not None else next(iter(self.users))
            config.update({"sasl.mechanism": mechanism, "sasl.username": user,
                           "sasl.password": password if password is not None else self.users.get(user, "")})
        if protocol in TLS_PROTOCOLS:
            assert self.certs is not None
            config["ssl.ca.location"] = self.certs.ca_file
            if client_certificate:
                config["ssl.certificate.location"] = self.certs.client_cert_file
                config["ssl.key.location"] = self.certs.client_key_file
        return config


class SecuredBrokerAccess:
    """What BrokerThread and BrokerProcess share for a secured broker: its test
    certificates and the client properties for one listener. The class using it has
    ``security`` (a SecuritySetup or None) and ``bootstrap_for(listener)``."""

    security: SecuritySetup | None

    def bootstrap_for(self, listener: str) -> str:  # pragma: no cover - provided by the user
        raise NotImplementedError

    @property
    def certs(self) -> TestCertificates:
        """The test CA and client certificate files of a TLS broker."""
        assert self.security is not None and self.security.certs is not None
        return self.security.certs

    def client_config(self, listener: str, user: str | None = None, **kwargs) -> dict[str, str]:
        """Client properties (Kafka/librdkafka names) for ``listener`` as ``user``."""
        assert self.security is not None
        return self.security.client_config(self.bootstrap_for(listener), listener, user, **kwargs)
