"""client/security.py: Kafka's JAAS syntax, client security properties (Kafka's
and librdkafka's names), the SCRAM client against RFC 7677's vector, unsecured JWTs,
and TLS verification against a throwaway CA on a local TLS socket."""

from __future__ import annotations

import base64
import json
import pickle
import socket
import ssl
import threading

import pytest
from txbroker.client import security as cs
from txbroker.client.security import (
    ClientSecurity,
    ScramClient,
    SecurityConfigError,
    SecurityError,
    parse_jaas_config,
)

from tests.pki import make_ca, make_cert

PLAIN = cs.PLAIN_MODULE
SCRAM = cs.SCRAM_MODULE
OAUTH = cs.OAUTHBEARER_MODULE


# --- JAAS ---------------------------------------------------------------------------------


def test_jaas_kafka_documentation_example() -> None:
    [entry] = parse_jaas_config(
        f'{SCRAM} required username="alice" password="alice-secret";')
    assert entry.login_module == SCRAM
    assert entry.flag == "required"
    assert entry.options == {"username": "alice", "password": "alice-secret"}


def test_jaas_escapes_bare_words_comments_and_several_entries() -> None:
    entries = parse_jaas_config(
        f'{PLAIN} Required\n  username=bob // the user\n'
        f'  password="p\\"w;=d" /* a comment */ ;\n'
        f"{OAUTH} optional unsecuredLoginStringClaim_sub='svc';")
    assert [e.login_module for e in entries] == [PLAIN, OAUTH]
    assert entries[0].flag == "required"  # flags are case-insensitive, as in Java
    assert entries[0].options == {"username": "bob", "password": 'p"w;=d'}
    assert entries[1].options == {"unsecuredLoginStringClaim_sub": "svc"}


@pytest.mark.parametrize("text, message", [
    ("", "is empty"),
    (f'{PLAIN} username="a";', "control flag"),
    (f'{PLAIN} required username="a"', "must end with ';'"),
    (f'{PLAIN} required username;', "option=value"),
    (f'{PLAIN} required username=;', "option=value"),
    (f'{PLAIN} required password="open', "unterminated"),
    ('"quoted.Module" required;', "login module class name"),
])
def test_jaas_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message):
        parse_jaas_config(text)


# --- properties ---------------------------------------------------------------------------


def test_plaintext_is_the_default() -> None:
    s = ClientSecurity.from_properties({"bootstrap.servers": "x:1"})
    assert s.protocol == "PLAINTEXT" and not s.uses_tls and not s.uses_sasl


def test_sasl_from_jaas_and_case_insensitive_protocol() -> None:
    s = ClientSecurity.from_properties({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="alice" password="s3cret";'})
    assert (s.protocol, s.mechanism, s.username, s.password) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "s3cret")
    assert "s3cret" not in repr(s)


def test_librdkafka_names_and_spark_prefix() -> None:
    s = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
        "sasl.username": "bob", "sasl.password": "pw"})
    assert (s.mechanism, s.username, s.password) == ("PLAIN", "bob", "pw")
    s = ClientSecurity.from_properties({
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN} required username="c" password="d";',
        "subscribe": "t"}, prefix="kafka.")
    assert (s.username, s.password) == ("c", "d")


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "TLS"}, "is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SASL_SSL"}, r"GSSAPI \(Kafka's default\).*not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "needs sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN} required username="a";'}, "lacks password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{OAUTH} required unsecuredLoginStringClaim_sub="a";'},
     "PLAIN needs .*PlainLoginModule"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
      "sasl.jaas.config": f'{OAUTH} required;'}, "principal claim"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN} required username="a" password="b"; '
                          f'{PLAIN} required username="c" password="d";'},
     "exactly one login module"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ts.pem"},
     "cannot read ssl.truststore.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"},
     "use https"),
    ({"security.protocol": "SSL", "ssl.keystore.key": "x"}, "go together"),
])
def test_property_errors_name_the_key(props: dict, message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message):
        ClientSecurity.from_properties(props, source="client.properties")


def test_a_plain_or_scram_module_serves_either_mechanism() -> None:
    # Kafka's PLAIN and SCRAM clients both read the Subject's username/password.
    s = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{PLAIN} required username="a" password="b";'})
    assert s.username == "a"


def test_jks_store_is_refused_with_the_conversion_command(tmp_path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 32)
    with pytest.raises(SecurityConfigError, match="keytool -importkeystore"):
        ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": str(jks)})


# --- SCRAM and OAUTHBEARER ----------------------------------------------------------------

RFC7677_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_scram_client_rfc7677_vector() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(RFC7677_SERVER_FIRST) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ValueError, match="does not match"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))
    with pytest.raises(ValueError, match="invalid-proof"):
        client.verify(b"e=invalid-proof")


def test_scram_client_refuses_a_server_that_does_not_extend_the_nonce_or_cheapens_it() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    with pytest.raises(ValueError, match="nonce"):
        client.final(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ValueError, match="below the minimum"):
        client.final(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1")


def test_unsecured_jwt_has_kafkas_claims() -> None:
    token, ext = cs._unsecured_jwt({
        "unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginNumberClaim_n": "7",
        "unsecuredLoginListClaim_scope": ",a,b", "unsecuredLoginExtension_traceId": "123",
        "unsecuredLoginLifetimeSeconds": "60"}, "sasl.jaas.config")
    header, payload, signature = token.split(".")
    assert signature == ""

    def decode(part: str) -> dict:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))

    assert decode(header) == {"alg": "none"}
    claims = decode(payload)
    assert claims["sub"] == "alice" and claims["n"] == 7 and claims["scope"] == ["a", "b"]
    assert 59 <= claims["exp"] - claims["iat"] <= 61
    assert ext == {"traceId": "123"}


# --- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A throwaway CA, a server certificate for localhost / 127.0.0.1, a client
    certificate (CN alice) and a second, unrelated CA."""
    d = tmp_path_factory.mktemp("pki")
    make_ca(d)
    make_cert(d, "server", "localhost")
    make_cert(d, "client", "alice", san=None)
    make_ca(d, "other")
    return d


def _tls_server(pki, require_client_cert: bool = False, host: str = "127.0.0.1"):
    """A one-connection TLS echo of the client certificate's CN."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(pki / "ca.pem")
    listener = socket.create_server((host, 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                cert = tls.getpeercert() or {}
                cn = dict(x[0] for x in cert.get("subject", ())).get("commonName", "-")
                tls.sendall(cn.encode())
        except (ssl.SSLError, OSError):
            conn.close()
        finally:
            listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return port


def test_tls_with_a_pem_truststore_and_hostname_check(pki) -> None:
    port = _tls_server(pki)
    s = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                        "ssl.truststore.location": str(pki / "ca.pem")})
    with s.connect("localhost", port, timeout=5) as sock:
        assert isinstance(sock, ssl.SSLSocket)
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
        assert sock.recv(100) == b"-"


def test_untrusted_certificate_is_a_one_line_security_error(pki) -> None:
    port = _tls_server(pki)
    s = ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": str(pki / "other.pem")})
    with pytest.raises(SecurityError, match="not trusted: unable to get local issuer"):
        s.connect("127.0.0.1", port, timeout=5)


def test_hostname_check_and_switching_it_off(pki) -> None:
    ca = (pki / "ca.pem").read_text()
    port = _tls_server(pki, host="127.0.0.2")  # Linux routes all of 127/8 to lo
    checked = ClientSecurity.from_properties({"security.protocol": "SSL",
                                              "ssl.truststore.certificates": ca})
    # The certificate names localhost and 127.0.0.1, not 127.0.0.2.
    with pytest.raises(SecurityError, match="mismatch|doesn't match"):
        checked.connect("127.0.0.2", port, timeout=5)
    port = _tls_server(pki, host="127.0.0.2")
    unchecked = ClientSecurity.from_properties({
        "security.protocol": "SSL", "ssl.truststore.certificates": ca,
        "ssl.endpoint.identification.algorithm": ""})
    with unchecked.connect("127.0.0.2", port, timeout=5) as sock:
        assert sock.recv(100) == b"-"


def test_mutual_tls_with_kafka_pem_keystore_and_librdkafka_names(pki) -> None:
    chain = (pki / "client.pem").read_text()
    key = (pki / "client.key").read_text()
    for props in (
        {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
         "ssl.keystore.key": key, "ssl.truststore.location": str(pki / "ca.pem")},
        {"ssl.certificate.location": str(pki / "client.pem"),
         "ssl.key.location": str(pki / "client.key"), "ssl.ca.location": str(pki / "ca.pem")},
    ):
        port = _tls_server(pki, require_client_cert=True)
        s = ClientSecurity.from_properties({"security.protocol": "SSL", **props})
        with s.connect("localhost", port, timeout=5) as sock:
            assert sock.recv(100) == b"alice"


def test_plaintext_server_behind_an_ssl_client_says_so() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_garbage() -> None:
        conn, _ = listener.accept()
        conn.recv(1000)
        conn.sendall(b"\x00\x00\x00\x10" + b"\x00" * 16)  # a Kafka frame, not TLS
        conn.close()
        listener.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    s = ClientSecurity.from_properties({"security.protocol": "SSL"})
    with pytest.raises(SecurityError, match="SSL handshake with 127.0.0.1"):
        s.connect("127.0.0.1", port, timeout=5)


def test_settings_pickle_without_their_ssl_context(pki) -> None:
    s = ClientSecurity.from_properties({"security.protocol": "SSL",
                                        "ssl.truststore.location": str(pki / "ca.pem")})
    assert s.ssl_context() is not None
    copy = pickle.loads(pickle.dumps(s))
    assert copy.cafile == s.cafile and copy.ssl_context() is not s.ssl_context()
