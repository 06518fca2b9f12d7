"""Security pieces without a network: JAAS text as Kafka's JaasConfig reads it, the
SASL mechanisms' state machines, ssl.principal.mapping.rules as Kafka's
SslPrincipalMapper applies them, the RFC 2253 subject, and config errors."""

from __future__ import annotations

import base64
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.broker.config import BrokerConfig, ConfigError
from txbroker.broker.listeners import build_listeners
from txbroker.broker.security import sasl, tls
from txbroker.broker.security.scram_credentials import ScramCredentialStore, add_users
from txbroker.protocol import scram
from txbroker.testing.security import plain_jaas_config

from txbroker.cli import main

# -- JAAS -----------------------------------------------------------------------------


def test_jaas_plain_users_quotes_escapes_and_comments() -> None:
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
            '  username="admin" password="admin-secret" // the broker\'s own login\n'
            '  user_admin="admin-secret" /* users: */ user_alice=\'al"ice\' '
            'user_bob="b\\\\o\\"b\\n";')
    [entry] = sasl.parse_jaas_config(text)
    assert entry.login_module.endswith("PlainLoginModule")
    assert entry.control_flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret",
                             "user_admin": "admin-secret", "user_alice": 'al"ice',
                             "user_bob": 'b\\o"b\n'}


@pytest.mark.parametrize("text, message", [
    ("", "Login module not specified"),
    ("a.b.C", "control flag not specified"),
    ("a.b.C sometimes;", "Invalid login module control flag"),
    ("a.b.C required user_a=;", "Value not specified for key 'user_a'"),
    ("a.b.C required user_a=123;", "Value not specified for key 'user_a'"),  # a number token
    ('a.b.C required user_a="x"', "not terminated by semi-colon"),
])
def test_jaas_errors_are_kafkas(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sasl.parse_jaas_config(text)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
                       st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                      blacklist_characters="\n\r"), max_size=12),
                       min_size=1, max_size=4))
def test_plain_jaas_config_round_trips_any_password(users: dict[str, str]) -> None:
    [entry] = sasl.parse_jaas_config(plain_jaas_config(users))
    assert {k[5:]: v for k, v in entry.options.items()} == users


# -- mechanisms ---------------------------------------------------------------------------


def test_plain_server() -> None:
    server = sasl.PlainServer({"alice": "pw"})
    assert server.evaluate(b"\x00alice\x00pw") == b""
    assert server.principal_name == "alice"
    for token, message in [(b"\x00alice\x00nope", "Invalid username or password"),
                           (b"\x00mallory\x00pw", "Invalid username or password"),
                           (b"alice\x00pw", "expected 3 tokens, got 2"),
                           (b"\x00\x00pw", "username not specified"),
                           (b"\x00alice\x00", "password not specified"),
                           (b"bob\x00alice\x00pw", "authorization id that is different")]:
        with pytest.raises(sasl.AuthenticationFailed, match=message):
            sasl.PlainServer({"alice": "pw"}).evaluate(token)


class _Store:
    def __init__(self, creds: dict) -> None:
        self.creds = creds

    def get(self, user: str, mechanism: str):
        return self.creds.get((user, mechanism))


@pytest.mark.parametrize("mechanism", sorted(scram.MECHANISMS))
def test_scram_server_with_the_shared_client_primitives(mechanism: str) -> None:
    mech = scram.mechanism(mechanism)
    store = _Store({("alice", mechanism): scram.make_credential(mech, "pw")})

    def exchange(password: str) -> sasl.ScramServer:
        server = sasl.ScramServer(mechanism, store)
        first = scram.ClientFirstMessage("alice", scram.generate_nonce())
        server_first_bytes = server.evaluate(first.to_bytes())
        server_first = scram.ServerFirstMessage.parse(server_first_bytes)
        salted = scram.salted_password(mech, password, server_first.salt, server_first.iterations)
        final = scram.ClientFinalMessage(b"n,,", server_first.nonce)
        auth = scram.auth_message(first.bare(), server_first_bytes, final.without_proof())
        final = scram.ClientFinalMessage(b"n,,", server_first.nonce, scram.client_proof(mech, salted, auth))
        server_final = scram.ServerFinalMessage.parse(server.evaluate(final.to_bytes()))
        assert server_final.server_signature == scram.server_signature(
            mech, scram.server_key(mech, salted), auth)
        return server

    assert exchange("pw").principal_name == "alice"
    with pytest.raises(sasl.AuthenticationFailed, match=f"invalid credentials with SASL mechanism {mechanism}"):
        exchange("wrong")
    with pytest.raises(sasl.AuthenticationFailed) as e:
        sasl.ScramServer(mechanism, store).evaluate(b"n,,n=mallory,r=abc")
    assert e.value.user == "mallory" and "Invalid user credentials" in e.value.reason
    with pytest.raises(sasl.AuthenticationFailed, match="different from username"):
        sasl.ScramServer(mechanism, store).evaluate(b"n,a=bob,n=alice,r=abc")


def _jwt(header: dict, claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header)}.{enc(claims)}."


def _bearer(jwt: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {jwt}\x01\x01".encode()


def test_oauthbearer_unsecured_validation() -> None:
    # Whole seconds: Kafka compares 1000 * iat with the time in whole milliseconds, so an
    # iat a fraction of a millisecond ahead is "in the future".
    now = float(int(time.time()))
    good = _jwt({"alg": "none"}, {"sub": "dave", "exp": now + 60, "iat": now, "scope": "a b"})
    server = sasl.OAuthBearerServer({})
    assert server.evaluate(_bearer(good)) == b""
    assert server.principal_name == "dave"
    cases = [
        ({"alg": "RS256"}, {"sub": "x", "exp": now + 60}, "invalid_token"),
        ({"alg": "none"}, {"exp": now + 60}, "invalid_token"),  # no sub
        ({"alg": "none"}, {"sub": "x"}, "invalid_token"),  # no exp
        ({"alg": "none"}, {"sub": "x", "exp": now - 1}, "invalid_token"),
        ({"alg": "none"}, {"sub": "x", "exp": now + 60, "iat": now + 30}, "invalid_token"),
    ]
    for header, claims, status in cases:
        server = sasl.OAuthBearerServer({})
        assert json.loads(server.evaluate(_bearer(_jwt(header, claims))))["status"] == status
        with pytest.raises(sasl.AuthenticationFailed) as e:
            server.evaluate(b"\x01")
        assert json.loads(str(e.value))["status"] == status
    scoped = sasl.OAuthBearerServer({"unsecuredValidatorRequiredScope": "admin"})
    answer = json.loads(scoped.evaluate(_bearer(good)))
    assert answer == {"status": "insufficient_scope", "scope": "admin"}
    with pytest.raises(sasl.AuthenticationFailed, match="authorization id"):
        sasl.OAuthBearerServer({}).evaluate(_bearer(good, authzid="eve"))
    with pytest.raises(sasl.AuthenticationFailed):
        sasl.OAuthBearerServer({}).evaluate(b"n,,\x01auth=Basic abc\x01\x01")
    # A second ahead of the validator's clock: in the future (no clock skew allowed).
    ahead = (int(time.time() * 1000) + 1000) / 1000
    server = sasl.OAuthBearerServer({})
    early = _jwt({"alg": "none"}, {"sub": "x", "exp": ahead + 60, "iat": ahead})
    assert json.loads(server.evaluate(_bearer(early)))["status"] == "invalid_token"


# -- principals from certificates -----------------------------------------------------------

SUBJECT = ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
           (("organizationalUnitName", "eng"),), (("commonName", "alice"),),
           (("emailAddress", "alice@example.com"),))


def test_rfc2253_name_as_java_writes_it() -> None:
    assert tls.rfc2253_name(SUBJECT) == (
        "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice,OU=eng,"
        "O=Example\\, Inc.,C=US")
    assert tls.rfc2253_name(((("commonName", "#lead+trail "),),)) == "CN=\\#lead\\+trail\\ "
    assert tls.rfc2253_name(((("commonName", "  a=b#c\x00"),),)) == "CN=\\ \\ a\\=b\\#c\\00"


@pytest.mark.parametrize("rules, dn, name", [
    ("DEFAULT", "CN=alice,OU=eng", "CN=alice,OU=eng"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/", "CN=alice,OU=eng", "alice@eng"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U", "CN=alice,OU=eng", "ALICE@ENG"),
    ("RULE:^CN=(.*?),OU=(.*?)$/$1/L, DEFAULT", "CN=Alice,OU=eng", "alice"),
    ("RULE:^OU=x$/nope/,DEFAULT", "CN=bob", "CN=bob"),  # first rule does not match
    ("RULE:^CN=([^,]*).*$/$1$3/", "CN=carl,O=x", "carl$3"),  # $3 names no group: text
    ("RULE:^CN=(.*)$/a\\/b\\$1/", "CN=x", "a/b$1"),  # escaped '/' and '$'
    ("RULE:^cn=(.*)$/$1/,RULE:^CN=(.*)$/$1/", "CN=dora", "dora"),
])
def test_principal_mapping_rules_as_kafka(rules: str, dn: str, name: str) -> None:
    assert tls.PrincipalMapper(rules).name(dn) == name


def test_no_matching_rule_and_bad_rules() -> None:
    with pytest.raises(tls.NoMatchingRule):
        tls.PrincipalMapper("RULE:^OU=.*$/x/").name("CN=alice")
    for bad in ("RULE:^CN=(.*)$/$1/X", "NONSENSE", "RULE:^CN=($/x/"):
        with pytest.raises(ValueError):
            tls.parse_principal_mapping_rules(bad)
    with pytest.raises(ConfigError):
        BrokerConfig({"ssl.principal.mapping.rules": "RULE:broken"})


# -- listeners' config errors ---------------------------------------------------------------


@pytest.mark.parametrize("overrides, message", [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "names no mechanism txbroker supports"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "GSSAPI"},
     "(GSSAPI; sasl.enabled.mechanisms, --override"),
    ({"listeners": "SSL://127.0.0.1:0"}, "JKS key stores are not supported"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM"}, "needs ssl.keystore.location"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
      "ssl.keystore.location": "/no/such.pem"}, "cannot read /no/such.pem"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.enabled.protocols": "TLSv1.1"}, "no TLS version"),
    ({"connection.failed.authentication.delay.ms": "600000"}, "less than connections.max.idle.ms"),
])
def test_security_config_errors_exit_2_with_one_line(tmp_path, capsys, overrides, message) -> None:
    argv = ["serve", "--data-dir", str(tmp_path / "d")]
    for k, v in overrides.items():
        argv += ["--override", f"{k}={v}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_listener_prefix_overrides_the_global_key() -> None:
    cfg = BrokerConfig({"listeners": "A://:1,B://:2", "listener.security.protocol.map": "A:SASL_SSL,B:SASL_PLAINTEXT",
                        "sasl.enabled.mechanisms": "PLAIN",
                        "listener.name.b.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                        "listener.name.b.plain.sasl.jaas.config": "x.PlainLoginModule required user_u=\"p\";"})
    assert cfg.for_listener("A", "sasl.enabled.mechanisms") == ["PLAIN"]
    assert cfg.for_listener("B", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert cfg.jaas_config("B", "PLAIN")[1] == "listener.name.b.plain.sasl.jaas.config"
    with pytest.raises(ConfigError, match="unknown broker config"):
        BrokerConfig({"listener.name.b.no.such.key": "1"})
    with pytest.raises(ConfigError):
        BrokerConfig({"listener.name.b.ssl.client.auth": "sometimes"})
    # A SASL listener without TLS builds without any ssl.* key.
    cfg = BrokerConfig({"listeners": "B://127.0.0.1:0", "listener.security.protocol.map": "B:SASL_PLAINTEXT",
                        "listener.name.b.sasl.enabled.mechanisms": "PLAIN",
                        "sasl.jaas.config": plain_jaas_config({"u": "p"})})
    [listener] = build_listeners(cfg)
    assert listener.sasl is not None and listener.sasl.plain_users == {"u": "p"}


def test_scram_credentials_are_durable_and_reloaded(tmp_path) -> None:
    add_users(str(tmp_path), {"alice": "pw"})
    store = ScramCredentialStore(str(tmp_path))
    assert store.users() == {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
    store.apply({}, [("alice", "SCRAM-SHA-256")])
    assert ScramCredentialStore(str(tmp_path)).users() == {"alice": {"SCRAM-SHA-512": 4096}}
    store.apply({}, [("alice", "SCRAM-SHA-512")])
    assert ScramCredentialStore(str(tmp_path)).users() == {}


def test_keystores_pem_file_inline_pem_and_pkcs12(tmp_path) -> None:
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    from txbroker.testing.security import TestCertificates

    certs = TestCertificates(str(tmp_path / "tls"))
    pem = open(certs.server_keystore).read()
    split = pem.index("-----BEGIN CERTIFICATE-----")
    key_pem, chain_pem = pem[:split], pem[split:]
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    cert = x509.load_pem_x509_certificate(chain_pem.encode())
    p12 = tmp_path / "server.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", key, cert, None, serialization.BestAvailableEncryption(b"pw")))
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": open(certs.ca_file).read(), "ssl.client.auth": "required"}
    for keystore in ({"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server_keystore},
                     {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain_pem,
                      "ssl.keystore.key": key_pem},
                     {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12),
                      "ssl.keystore.password": "pw"}):
        [listener] = build_listeners(BrokerConfig({**base, **keystore}))
        ctx = listener.ssl_context
        assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
        assert len(ctx.get_ca_certs()) == 1
    with pytest.raises(ConfigError, match="cannot open PKCS12"):
        build_listeners(BrokerConfig({**base, "ssl.keystore.type": "PKCS12",
                                      "ssl.keystore.location": str(p12), "ssl.keystore.password": "no"}))
    [listener] = build_listeners(BrokerConfig({**base, "ssl.keystore.type": "PEM",
                                               "ssl.keystore.location": certs.server_keystore,
                                               "ssl.enabled.protocols": "TLSv1.3"}))
    assert listener.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3
