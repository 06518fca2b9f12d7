"""Client side of Kafka's security: TLS and SASL for the blocking clients of this
repository (the admin tools in tools/, the Spark source in spark_jobs/).

Settings come from Kafka client properties with Kafka's names (``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``,
``ssl.endpoint.identification.algorithm``) or librdkafka's (``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``), so the same properties file works with Kafka's tools,
confluent-kafka and ours::

    security = ClientSecurity.from_properties(props)
    sock = security.connect("broker.example", 9093, timeout=30)

``connect`` returns a socket (TLS-wrapped for SSL/SASL_SSL) on which SaslHandshake v1
and SaslAuthenticate v2 have already succeeded. Failures raise ``SecurityError``,
one line with Kafka's error name where the broker gave one.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import socket
import ssl
import struct
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.protocol.messages import decode_response, encode_request, request_module

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_HANDSHAKE_VERSION = 1  # v1: the SASL tokens travel in SaslAuthenticate (KIP-152)
SASL_AUTHENTICATE_VERSION = 2

# Login modules (Kafka's class names) and the mechanisms they serve. Kafka's PLAIN and
# SCRAM clients both read the username and password the login module put in the JAAS
# Subject, so either module works for either mechanism, as with Kafka's clients.
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_PASSWORD_MODULES = (PLAIN_MODULE, SCRAM_MODULE)
_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")

# Every client property this module reads: Kafka's (Java client) names, then librdkafka's.
KAFKA_SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
})
SECURITY_KEYS = KAFKA_SECURITY_KEYS | frozenset({
    "sasl.mechanisms", "sasl.username", "sasl.password", "ssl.ca.location", "ssl.ca.pem",
    "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem",
    "enable.ssl.certificate.verification",
})


class SecurityConfigError(ValueError):
    """Client security properties that cannot work (names the key)."""


class SecurityError(Exception):
    """TLS or SASL failed on a connection. ``code`` is Kafka's error name
    (``SASL_AUTHENTICATION_FAILED``, ``UNSUPPORTED_SASL_MECHANISM``, ...) when the
    broker answered with one, else None. Deliberately not an OSError: the same
    settings fail the same way, so callers that retry network errors must not retry it."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


# --- JAAS ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> list[JaasEntry]:
    """Kafka's ``sasl.jaas.config`` syntax: ``<LoginModuleClass> <flag> key=value ...;``
    per module, values quoted ("..." with backslash escapes) or bare words."""
    entries: list[JaasEntry] = []
    tokens = _jaas_tokens(text, key)
    i = 0
    while i < len(tokens):
        module, quoted = tokens[i]
        if quoted or module in ("=", ";"):
            raise SecurityConfigError(f"{key}: expected a login module class name, got {module!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][1] \
                or tokens[i + 1][0].lower() not in _JAAS_FLAGS:
            got = tokens[i + 1][0] if i + 1 < len(tokens) else "the end"
            raise SecurityConfigError(f"{key}: {module} must be followed by a control flag "
                                      f"({'|'.join(_JAAS_FLAGS)}), got {got!r}")
        flag = tokens[i + 1][0].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise SecurityConfigError(f"{key}: the entry of {module} must end with ';'")
            name, quoted = tokens[i]
            if name == ";" and not quoted:
                i += 1
                break
            if quoted or i + 2 >= len(tokens) or tokens[i + 1] != ("=", False) \
                    or tokens[i + 2] == (";", False):
                raise SecurityConfigError(f"{key}: expected option=value in the entry of "
                                          f"{module}, near {name!r}")
            options[name] = tokens[i + 2][0]
            i += 3
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise SecurityConfigError(f"{key} is empty: give e.g. {PLAIN_MODULE} required "
                                  'username="alice" password="alice-secret";')
    return entries


def _jaas_tokens(text: str, key: str) -> list[tuple[str, bool]]:
    """(token, was quoted): words, quoted strings, '=' and ';'. Comments as Java's
    StreamTokenizer (which Kafka uses) skips them: // to end of line and /* */."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise SecurityConfigError(f"{key}: unterminated /* comment")
            i = end + 2
        elif c in "=;":
            out.append((c, False))
            i += 1
        elif c in "\"'":
            value: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise SecurityConfigError(f"{key}: unterminated quoted value")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    value.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
                    i += 2
                    continue
                value.append(ch)
                i += 1
            out.append(("".join(value), True))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in "=;\"'":
                i += 1
            out.append((text[start:i], False))
    return out


# --- settings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSecurity:
    """What a client needs to open an authenticated connection. Build it with
    ``from_properties``; PLAINTEXT (the default) is ``ClientSecurity()``."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    oauth_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    cafile: str | None = None  # PEM file or directory of trusted certificates
    cadata: str | None = None  # PEM text of trusted certificates
    certificate_pem: str | None = field(default=None, repr=False)  # client chain (+ key)
    key_pem: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify: bool = True
    _context: list = field(default_factory=list, repr=False, compare=False)  # built lazily

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, prefix: str = "",
                        source: str = "") -> ClientSecurity:
        """Settings from client properties (``prefix`` e.g. "kafka." for Spark's option
        names; ``source`` names where they came from, for messages). Every problem
        raises SecurityConfigError naming the key."""
        return _from_properties({k[len(prefix):]: str(v) for k, v in props.items()
                                 if k.startswith(prefix)}, prefix,
                                f" in {source}" if source else "")

    def __getstate__(self) -> dict:
        # Spark pickles options to its workers: each process builds its own SSLContext.
        return {**self.__dict__, "_context": []}

    def ssl_context(self) -> ssl.SSLContext:
        if not self._context:
            self._context.append(_build_context(self))
        return self._context[0]

    def connect(self, host: str, port: int, timeout: float,
                client_id: str = "txbroker-client") -> socket.socket:
        """A connected socket to ``host:port``, TLS and SASL done as configured."""
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.uses_tls:
                sock = _tls_handshake(self.ssl_context(), sock, host, port)
            if self.uses_sasl:
                authenticate(sock, self, client_id, f"{host}:{port}")
        except BaseException:
            sock.close()
            raise
        return sock


def _from_properties(p: dict[str, str], prefix: str, where: str) -> ClientSecurity:
    def key(name: str) -> str:
        return prefix + name

    def get(name: str) -> str | None:
        value = p.get(name)
        return None if value is None or value.strip() == "" else value.strip()

    protocol = (get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise SecurityConfigError(f"{key('security.protocol')}={p['security.protocol']}{where} "
                                  f"is not one of {', '.join(PROTOCOLS)}")
    values: dict[str, Any] = {"protocol": protocol}
    if protocol.startswith("SASL_"):
        values.update(_sasl_settings(p, get, key, where))
    if protocol in ("SSL", "SASL_SSL"):
        values.update(_tls_settings(p, get, key, where))
    security = ClientSecurity(**values)
    if security.uses_tls:
        security.ssl_context()  # file and password problems now, as configuration errors
    return security


def _sasl_settings(p, get, key, where) -> dict[str, Any]:
    mechanism = (get("sasl.mechanism") or get("sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        default = " (Kafka's default)" if get("sasl.mechanism") is None \
            and get("sasl.mechanisms") is None else ""
        raise SecurityConfigError(
            f"{key('sasl.mechanism')}={mechanism}{default}{where} is not supported: use one of "
            f"{', '.join(MECHANISMS)}")
    jaas_text = get("sasl.jaas.config")
    out: dict[str, Any] = {"mechanism": mechanism}
    if jaas_text is None:
        # librdkafka's way; Kafka's Java client has no such keys.
        if mechanism == "OAUTHBEARER":
            raise SecurityConfigError(
                f"{key('sasl.jaas.config')} is required for OAUTHBEARER{where}: "
                f"{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub=\"alice\";")
        if get("sasl.username") is None or p.get("sasl.password") is None:
            raise SecurityConfigError(
                f"{mechanism} needs {key('sasl.jaas.config')}{where} "
                f'({PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE} required '
                f'username="alice" password="alice-secret";) or sasl.username and '
                "sasl.password")
        return {**out, "username": get("sasl.username"), "password": p["sasl.password"]}
    entries = parse_jaas_config(jaas_text, key("sasl.jaas.config"))
    if len(entries) != 1:
        raise SecurityConfigError(f"{key('sasl.jaas.config')}{where} must have exactly one "
                                  f"login module for a client, got {len(entries)}")
    entry = entries[0]
    if mechanism == "OAUTHBEARER":
        if entry.login_module != OAUTHBEARER_MODULE:
            raise SecurityConfigError(f"{key('sasl.jaas.config')}{where}: OAUTHBEARER needs "
                                      f"{OAUTHBEARER_MODULE}, got {entry.login_module}")
        _unsecured_jwt(entry.options, key("sasl.jaas.config"))  # options checked now
        return {**out, "oauth_options": dict(entry.options)}
    if entry.login_module not in _PASSWORD_MODULES:
        raise SecurityConfigError(
            f"{key('sasl.jaas.config')}{where}: {mechanism} needs "
            f"{PLAIN_MODULE if mechanism == 'PLAIN' else SCRAM_MODULE}, got {entry.login_module}")
    missing = [o for o in ("username", "password") if o not in entry.options]
    if missing:
        raise SecurityConfigError(f"{key('sasl.jaas.config')}{where} lacks "
                                  f"{' and '.join(missing)}=\"...\"")
    return {**out, "username": entry.options["username"],
            "password": entry.options["password"]}


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SecurityConfigError(f"cannot read {what} {path}: {e.strerror}") from None


def _store_kind(data: bytes, declared: str | None, what: str) -> str:
    """PEM or PKCS12, from ssl.*store.type, else from the file's first bytes (Kafka's
    default type, JKS, is a Java format; keytool writes PKCS12 since Java 9)."""
    kind = (declared or "").upper()
    if data[:4] == b"\xfe\xed\xfe\xed":
        raise SecurityConfigError(
            f"{what} is a JKS keystore, which only Java reads: convert it with keytool "
            "-importkeystore -srcstoretype JKS -deststoretype PKCS12 (or use PEM)")
    if kind in ("", "JKS"):
        return "PEM" if b"-----BEGIN" in data[:4096] else "PKCS12"
    if kind not in ("PEM", "PKCS12"):
        raise SecurityConfigError(f"{what}: type {declared} is not supported (PEM, PKCS12)")
    return kind


def _pkcs12_to_pem(data: bytes, password: str | None, what: str) -> tuple[str, str | None]:
    """(certificates PEM, private key PEM or None) of a PKCS12 store."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise SecurityConfigError(
            f"{what} is PKCS12, which needs the 'cryptography' package; or convert it to "
            "PEM: openssl pkcs12 -in store.p12 -out store.pem -nodes") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError as e:
        raise SecurityConfigError(f"cannot open {what} (wrong password?): {e}") from None
    certs = "".join(c.public_bytes(Encoding.PEM).decode()
                    for c in ([cert] if cert else []) + list(extra or []))
    key_pem = None if key is None else key.private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return certs, key_pem


def _tls_settings(p, get, key, where) -> dict[str, Any]:
    out: dict[str, Any] = {}
    algorithm = p.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):  # "none" is librdkafka's spelling
        raise SecurityConfigError(f"{key('ssl.endpoint.identification.algorithm')}={algorithm}"
                                  f"{where}: use https (verify the host name) or empty")
    out["check_hostname"] = algorithm == "https"
    verification = (get("enable.ssl.certificate.verification") or "true").lower()
    if verification not in ("true", "false"):
        raise SecurityConfigError(f"enable.ssl.certificate.verification{where} must be "
                                  "true or false")
    out["verify"] = verification == "true"
    # Trust: Kafka's truststore, else librdkafka's CA, else the system's trusted CAs.
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if location and inline:
        raise SecurityConfigError(f"give {key('ssl.truststore.location')} or "
                                  f"{key('ssl.truststore.certificates')}{where}, not both")
    if location:
        what = f"{key('ssl.truststore.location')} {location}"
        data = _read(location, key("ssl.truststore.location"))
        if _store_kind(data, get("ssl.truststore.type"), what) == "PEM":
            out["cafile"] = location
        else:
            out["cadata"] = _pkcs12_to_pem(data, p.get("ssl.truststore.password"), what)[0]
    elif inline:
        out["cadata"] = inline
    elif get("ssl.ca.location"):
        out["cafile"] = get("ssl.ca.location")
        if not os.path.exists(out["cafile"]):
            raise SecurityConfigError(f"ssl.ca.location {out['cafile']}{where} does not exist")
    elif get("ssl.ca.pem"):
        out["cadata"] = get("ssl.ca.pem")
    # The client's own certificate (mutual TLS).
    out["key_password"] = p.get("ssl.key.password") or None
    location = get("ssl.keystore.location")
    if location:
        what = f"{key('ssl.keystore.location')} {location}"
        data = _read(location, key("ssl.keystore.location"))
        if _store_kind(data, get("ssl.keystore.type"), what) == "PEM":
            out["certificate_pem"] = data.decode("ascii", "replace")
        else:
            certs, key_pem = _pkcs12_to_pem(data, p.get("ssl.keystore.password"), what)
            out.update(certificate_pem=certs, key_pem=key_pem, key_password=None)
    elif get("ssl.keystore.certificate.chain") or get("ssl.keystore.key"):
        if not (get("ssl.keystore.certificate.chain") and get("ssl.keystore.key")):
            raise SecurityConfigError(f"{key('ssl.keystore.certificate.chain')} and "
                                      f"{key('ssl.keystore.key')}{where} go together")
        out["certificate_pem"] = get("ssl.keystore.certificate.chain")
        out["key_pem"] = get("ssl.keystore.key")
    elif get("ssl.certificate.location") or get("ssl.certificate.pem"):
        cert = get("ssl.certificate.location")
        out["certificate_pem"] = _read(cert, "ssl.certificate.location").decode(
            "ascii", "replace") if cert else get("ssl.certificate.pem")
        keyfile = get("ssl.key.location")
        out["key_pem"] = _read(keyfile, "ssl.key.location").decode("ascii", "replace") \
            if keyfile else get("ssl.key.pem")
    return out


def _build_context(s: ClientSecurity) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = s.check_hostname and s.verify
    ctx.verify_mode = ssl.CERT_REQUIRED if s.verify else ssl.CERT_NONE
    try:
        if s.cafile and os.path.isdir(s.cafile):
            ctx.load_verify_locations(capath=s.cafile)
        elif s.cafile or s.cadata:
            ctx.load_verify_locations(cafile=s.cafile, cadata=s.cadata)
        else:
            ctx.load_default_certs()
    except (ssl.SSLError, OSError, ValueError) as e:
        raise SecurityConfigError(f"cannot load the trusted certificates "
                                  f"({s.cafile or 'inline PEM'}): {e}") from None
    if s.certificate_pem:
        _load_chain(ctx, s.certificate_pem, s.key_pem, s.key_password)
    return ctx


def _load_chain(ctx: ssl.SSLContext, chain: str, key: str | None,
                password: str | None) -> None:
    # ssl loads a chain only from files: write the PEM text to a private temporary file
    # for the duration of the call.
    fd, path = tempfile.mkstemp(prefix="txbroker-client-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(chain.strip() + "\n" + (key.strip() + "\n" if key else ""))
        ctx.load_cert_chain(path, password=password or None)
    except ssl.SSLError as e:
        raise SecurityConfigError(f"cannot load the client certificate and key "
                                  f"(ssl.keystore.*, ssl.key.password): {e.reason or e}") from None
    finally:
        os.unlink(path)


def _tls_handshake(ctx: ssl.SSLContext, sock: socket.socket, host: str,
                   port: int) -> ssl.SSLSocket:
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        raise SecurityError(f"SSL handshake with {host}:{port} failed: the broker's "
                            f"certificate is not trusted: {e.verify_message} (check "
                            "ssl.truststore.* and ssl.endpoint.identification.algorithm)") \
            from None
    except ssl.SSLError as e:
        reason = e.reason or str(e)
        hint = " (is it a TLS listener? security.protocol must match the listener's)" \
            if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                          "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_EOF_WHILE_READING") else ""
        raise SecurityError(f"SSL handshake with {host}:{port} failed: {reason}{hint}") \
            from None
    except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as e:
        raise SecurityError(f"SSL handshake with {host}:{port} failed: the broker closed "
                            f"the connection ({e.strerror or e}); a listener that wants a "
                            "client certificate (ssl.client.auth) or no TLS at all?") from None


# --- SASL ---------------------------------------------------------------------------------


def _exchange(sock: socket.socket, client_id: str) -> Callable[[int, int, Any], Any]:
    correlation = [0]

    def request(api_key: int, version: int, message: Any) -> Any:
        correlation[0] += 1
        sock.sendall(encode_request(api_key, version, correlation[0], client_id, message))
        header = _recv(sock, 4)
        (size,) = struct.unpack(">i", header)
        if not 0 < size <= 1 << 20:  # SASL answers are small; a bad frame is not read
            raise SecurityError(f"SASL: response frame of {size} bytes from the broker")
        cid, response = decode_response(api_key, version, _recv(sock, size))
        if cid != correlation[0]:
            raise SecurityError(f"SASL: correlation id {cid} in reply to {correlation[0]}")
        return response

    return request


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise SecurityError("the broker closed the connection during SASL authentication "
                                "(is the listener SASL_PLAINTEXT/SASL_SSL?)")
        buf += chunk
    return bytes(buf)


def authenticate(sock: socket.socket, security: ClientSecurity, client_id: str,
                 peer: str) -> None:
    """SaslHandshake v1 then SaslAuthenticate v2 rounds for ``security.mechanism``."""
    mechanism = security.mechanism or "GSSAPI"
    request = _exchange(sock, client_id)
    hs = request_module(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION)
    try:
        resp = request(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                       hs.SaslHandshakeRequest(mechanism=mechanism))
    except SecurityError:
        raise
    except OSError as e:
        raise SecurityError(f"SASL handshake with {peer} failed: {e}") from None
    if resp.error_code != ErrorCode.none:
        name = resp.error_code.name.upper()
        enabled = ", ".join(resp.mechanisms) or "none"
        raise SecurityError(f"{name}: {peer} does not enable SASL mechanism {mechanism} "
                            f"(enabled: {enabled})", name)

    auth = request_module(SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION)

    def send(token: bytes) -> bytes:
        try:
            answer = request(SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
                             auth.SaslAuthenticateRequest(auth_bytes=token))
        except SecurityError:
            raise
        except OSError as e:
            raise SecurityError(f"SASL authentication with {peer} failed: {e}") from None
        if answer.error_code != ErrorCode.none:
            name = answer.error_code.name.upper()
            detail = f": {answer.error_message}" if answer.error_message else ""
            raise SecurityError(f"{name}{detail} ({mechanism} as "
                                f"{security.username or 'OAUTHBEARER token'} at {peer})", name)
        return bytes(answer.auth_bytes)

    if mechanism == "PLAIN":
        # RFC 4616: authzid NUL authcid NUL passwd (no authzid, as Kafka's client sends)
        send(b"\0" + (security.username or "").encode() + b"\0"
             + (security.password or "").encode())
    elif mechanism.startswith("SCRAM-"):
        _scram(send, mechanism, security.username or "", security.password or "", peer)
    elif mechanism == "OAUTHBEARER":
        token, extensions = _unsecured_jwt(security.oauth_options, "sasl.jaas.config")
        # RFC 7628 initial client response: GS2 header, then kvpairs separated by 0x01.
        kv = "".join(f"{k}={v}\x01" for k, v in sorted(extensions.items()))
        challenge = send(f"n,,\x01auth=Bearer {token}\x01{kv}\x01".encode())
        if challenge:
            # RFC 7628 3.2.2: an error challenge ({"status": ...}); the client answers
            # with a lone 0x01 and the server then fails the exchange with its message.
            send(b"\x01")
            raise SecurityError(f"SASL_AUTHENTICATION_FAILED: OAUTHBEARER token refused by "
                                f"{peer}: {challenge.decode('utf-8', 'replace')}",
                                "SASL_AUTHENTICATION_FAILED")
    else:
        raise SecurityError(f"SASL mechanism {mechanism} is not supported by this client")


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802), on protocol/scram.py's
    primitives: ``first()``, ``final(server_first)``, ``verify(server_final)``.
    ``nonce`` is for tests (RFC 7677's vector); a random one otherwise."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:
        from txbroker.protocol import scram  # RFC 5802 primitives, shared with the broker

        self._scram = scram
        self.mech = scram.mechanism(mechanism)
        self.password = password
        self.first_message = scram.ClientFirstMessage(username, nonce or scram.generate_nonce())
        self._server_signature = b""

    def first(self) -> bytes:
        return self.first_message.to_bytes()

    def final(self, server_first: bytes) -> bytes:
        s = self._scram
        sf = s.ServerFirstMessage.parse(server_first)
        if not sf.nonce.startswith(self.first_message.nonce) \
                or len(sf.nonce) == len(self.first_message.nonce):
            raise s.ScramError("the server nonce does not extend the client nonce")
        if sf.iterations < self.mech.min_iterations:
            # A weak (or hostile) server must not get a cheap hash of the password.
            raise s.ScramError(f"{sf.iterations} iterations is below the minimum "
                               f"{self.mech.min_iterations}")
        salted = s.salted_password(self.mech, self.password, sf.salt, sf.iterations)
        cf = s.ClientFinalMessage(self.first_message.gs2_header.encode(), sf.nonce)
        message = s.auth_message(self.first_message.bare(), server_first, cf.without_proof())
        self._server_signature = s.server_signature(
            self.mech, s.server_key(self.mech, salted), message)
        proof = s.client_proof(self.mech, salted, message)
        return s.ClientFinalMessage(cf.channel_binding, sf.nonce, proof).to_bytes()

    def verify(self, server_final: bytes) -> None:
        s = self._scram
        sf = s.ServerFinalMessage.parse(server_final)
        if sf.error is not None:
            raise s.ScramError(f"the server says {sf.error}")
        if not hmac.compare_digest(sf.server_signature or b"", self._server_signature):
            raise s.ScramError("the server signature does not match")


def _scram(send: Callable[[bytes], bytes], mechanism: str, username: str, password: str,
           peer: str) -> None:
    client = ScramClient(mechanism, username, password)
    try:
        server_final = send(client.final(send(client.first())))
        client.verify(server_final)
    except ValueError as e:  # ScramError: a server that does not follow RFC 5802
        raise SecurityError(f"SASL_AUTHENTICATION_FAILED: SCRAM with {peer} failed: {e}",
                            "SASL_AUTHENTICATION_FAILED") from None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsecured_jwt(options: Mapping[str, str], key: str) -> tuple[str, dict[str, str]]:
    """An unsecured JWT (alg "none") from the options of Kafka's
    OAuthBearerUnsecuredLoginCallbackHandler: unsecuredLoginStringClaim_<name>,
    unsecuredLoginNumberClaim_<name>, unsecuredLoginListClaim_<name> (first character is
    the separator), unsecuredLoginPrincipalClaimName (default sub),
    unsecuredLoginLifetimeSeconds (default 3600), unsecuredLoginExtension_<name>.
    Development only: anyone can write such a token."""
    claims: dict[str, Any] = {}
    extensions: dict[str, str] = {}
    for name, value in options.items():
        if name.startswith("unsecuredLoginStringClaim_"):
            claims[name[len("unsecuredLoginStringClaim_"):]] = value
        elif name.startswith("unsecuredLoginNumberClaim_"):
            try:
                claims[name[len("unsecuredLoginNumberClaim_"):]] = json.loads(value)
            except ValueError:
                raise SecurityConfigError(f"{key}: {name}={value!r} is not a number") from None
        elif name.startswith("unsecuredLoginListClaim_"):
            claims[name[len("unsecuredLoginListClaim_"):]] = [
                v for v in value[1:].split(value[:1]) if v] if value else []
        elif name.startswith("unsecuredLoginExtension_"):
            extensions[name[len("unsecuredLoginExtension_"):]] = value
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim]:
        raise SecurityConfigError(f"{key}: OAUTHBEARER needs the principal claim, e.g. "
                                  f"unsecuredLoginStringClaim_{principal_claim}=\"alice\"")
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise SecurityConfigError(f"{key}: unsecuredLoginLifetimeSeconds must be a "
                                  "number") from None
    # Whole milliseconds, as Kafka's unsecured login handler: a rounded-up iat would be
    # in the future for a validator that compares milliseconds within the same one.
    now = int(time.time() * 1000) / 1000
    claims.setdefault("iat", now)
    claims.setdefault("exp", now + lifetime)
    header = _b64url(json.dumps({"alg": "none"}).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{header}.{payload}.", extensions
