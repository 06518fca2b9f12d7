"""SCRAM (RFC 5802, RFC 7677) primitives shared by the broker (server side) and clients.

Both ``broker/`` (the SaslAuthenticate exchange) and the tools' client side import this
module, so its public API is STABLE: the names below keep their signatures; additions
only. Public API:

- :data:`MECHANISMS` (``"SCRAM-SHA-256"``, ``"SCRAM-SHA-512"`` -> :class:`ScramMechanism`),
  :func:`mechanism`, :data:`MIN_ITERATIONS` / :data:`MAX_ITERATIONS` (Kafka's 4096..16384).
- Key derivation: :func:`hi`, :func:`salted_password`, :func:`client_key`,
  :func:`server_key`, :func:`stored_key`, :func:`client_signature`, :func:`client_proof`,
  :func:`server_signature`, :func:`verify_client_proof`, :func:`auth_message`,
  :class:`ScramCredential` / :func:`make_credential` (what a server stores).
- Messages, each with ``parse(bytes)`` and ``to_bytes()``: :class:`ClientFirstMessage`,
  :class:`ServerFirstMessage`, :class:`ClientFinalMessage`, :class:`ServerFinalMessage`.
- :func:`escape_saslname` / :func:`unescape_saslname` (``=2C`` / ``=3D``),
  :func:`generate_nonce`, :class:`ScramError` (every parse or check failure).

As Kafka does (ScramFormatter.normalize), passwords and names are UTF-8 encoded without
SASLprep, so credentials made here authenticate against Apache Kafka and back.
Channel binding is not supported (gs2 header ``n,,`` or ``n,a=<authzid>,``), as in Kafka.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(ValueError):
    """A SCRAM message that does not parse, or a check of one that fails."""


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    digest_size: int
    min_iterations: int = MIN_ITERATIONS


MECHANISMS: dict[str, ScramMechanism] = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 32),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 64),
}


def mechanism(name: str) -> ScramMechanism:
    """The mechanism called ``name``; ScramError if it is not a supported SCRAM mechanism."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise ScramError(f"unsupported SCRAM mechanism {name!r}") from None


# -- key derivation (RFC 5802 section 3) --------------------------------------------


def _hmac(mech: ScramMechanism, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, mech.hash_name).digest()


def _h(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def hi(mech: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(str, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    if iterations < 1:
        raise ScramError(f"invalid iteration count {iterations}")
    return hashlib.pbkdf2_hmac(mech.hash_name, password, salt, iterations)


def salted_password(mech: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hi(mech, password.encode("utf-8"), salt, iterations)


def client_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mech, salted, b"Client Key")


def server_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mech, salted, b"Server Key")


def stored_key(mech: ScramMechanism, client_key_: bytes) -> bytes:
    return _h(mech, client_key_)


def auth_message(client_first_bare: bytes, server_first: bytes, client_final_without_proof: bytes) -> bytes:
    return b",".join((client_first_bare, server_first, client_final_without_proof))


def client_signature(mech: ScramMechanism, stored_key_: bytes, auth_msg: bytes) -> bytes:
    return _hmac(mech, stored_key_, auth_msg)


def client_proof(mech: ScramMechanism, salted: bytes, auth_msg: bytes) -> bytes:
    ck = client_key(mech, salted)
    return _xor(ck, client_signature(mech, stored_key(mech, ck), auth_msg))


def server_signature(mech: ScramMechanism, server_key_: bytes, auth_msg: bytes) -> bytes:
    return _hmac(mech, server_key_, auth_msg)


def verify_client_proof(mech: ScramMechanism, stored_key_: bytes, auth_msg: bytes, proof: bytes) -> bool:
    """True if ``proof`` proves knowledge of the client key whose hash is ``stored_key_``."""
    if len(proof) != mech.digest_size:
        return False
    recovered_client_key = _xor(proof, client_signature(mech, stored_key_, auth_msg))
    return hmac.compare_digest(_h(mech, recovered_client_key), stored_key_)


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def make_credential(
    mech: ScramMechanism, password: str, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    if salt is None:
        salt = secrets.token_bytes(32)
    salted = salted_password(mech, password, salt, iterations)
    return ScramCredential(salt, stored_key(mech, client_key(mech, salted)), server_key(mech, salted), iterations)


def credential_from_salted_password(mech: ScramMechanism, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The credential for an already salted password (AlterUserScramCredentials sends that)."""
    return ScramCredential(salt, stored_key(mech, client_key(mech, salted)), server_key(mech, salted), iterations)


# -- names, nonces, base64 ----------------------------------------------------------


def escape_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(saslname: str) -> str:
    if re.search(r"=(?!2C|3D)", saslname):
        raise ScramError(f"invalid escape in saslname {saslname!r}")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def generate_nonce() -> str:
    """A random printable nonce without ',' (RFC 5802 'printable')."""
    return secrets.token_urlsafe(24)


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramError(f"invalid base64 in {what}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not valid UTF-8") from None


# RFC 5802 grammar pieces. printable: %x21-2B / %x2D-7E (no comma).
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\U0010ffff]|=2C|=3D)+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = r"(?:,(?P<extensions>[A-Za-z]+=[^,]*(?:,[A-Za-z]+=[^,]*)*))?"

# Patterns, compiled on first use by _fullmatch (re caches them): the saslname range up
# to U+10FFFF takes ~10 ms to compile, paid at every broker start otherwise.
_CLIENT_FIRST = (
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,n=(?P<user>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}"
)
_SERVER_FIRST = (
    rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]{{1,9}}){_EXTENSIONS}"
)
_CLIENT_FINAL = (
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = rf"(?:e=(?P<error>[^,]+)|v=(?P<verifier>{_BASE64})){_EXTENSIONS}"


def _fullmatch(pattern: str, text: str) -> re.Match | None:
    return re.fullmatch(pattern, text, re.DOTALL)


def _parse_extensions(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        out[key] = value
    return out


def _format_extensions(extensions: dict[str, str]) -> str:
    return "".join(f",{k}={v}" for k, v in extensions.items())


# -- messages -----------------------------------------------------------------------


@dataclass(frozen=True)
class ClientFirstMessage:
    """``gs2-header client-first-message-bare``; ``extensions`` e.g. Kafka's tokenauth=true."""

    username: str
    nonce: str
    authzid: str = ""
    extensions: dict[str, str] = field(default_factory=dict)

    @property
    def gs2_header(self) -> str:
        return f"n,a={escape_saslname(self.authzid)}," if self.authzid else "n,,"

    def bare(self) -> bytes:
        return f"n={escape_saslname(self.username)},r={self.nonce}{_format_extensions(self.extensions)}".encode()

    def to_bytes(self) -> bytes:
        return self.gs2_header.encode() + self.bare()

    @classmethod
    def parse(cls, data: bytes) -> ClientFirstMessage:
        m = _fullmatch(_CLIENT_FIRST, _text(data))
        if m is None:
            raise ScramError("invalid SCRAM client first message")
        authzid = unescape_saslname(m["authzid"]) if m["authzid"] else ""
        return cls(unescape_saslname(m["user"]), m["nonce"], authzid, _parse_extensions(m["extensions"]))


@dataclass(frozen=True)
class ServerFirstMessage:
    """``r=<client nonce + server nonce>,s=<salt>,i=<iterations>``."""

    nonce: str
    salt: bytes
    iterations: int
    extensions: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return f"r={self.nonce},s={_b64(self.salt)},i={self.iterations}{_format_extensions(self.extensions)}".encode()

    @classmethod
    def parse(cls, data: bytes) -> ServerFirstMessage:
        m = _fullmatch(_SERVER_FIRST, _text(data))
        if m is None:
            raise ScramError("invalid SCRAM server first message")
        iterations = int(m["iterations"])
        if iterations < 1:
            raise ScramError(f"invalid iteration count {iterations}")
        return cls(m["nonce"], _b64decode(m["salt"], "salt"), iterations, _parse_extensions(m["extensions"]))


@dataclass(frozen=True)
class ClientFinalMessage:
    """``c=<base64 gs2 header>,r=<nonce>,p=<proof>``; ``channel_binding`` is the decoded c=."""

    channel_binding: bytes
    nonce: str
    proof: bytes = b""
    extensions: dict[str, str] = field(default_factory=dict)

    def without_proof(self) -> bytes:
        return f"c={_b64(self.channel_binding)},r={self.nonce}{_format_extensions(self.extensions)}".encode()

    def to_bytes(self) -> bytes:
        return self.without_proof() + f",p={_b64(self.proof)}".encode()

    @classmethod
    def parse(cls, data: bytes) -> ClientFinalMessage:
        m = _fullmatch(_CLIENT_FINAL, _text(data))
        if m is None:
            raise ScramError("invalid SCRAM client final message")
        return cls(
            _b64decode(m["channel"], "channel binding"),
            m["nonce"],
            _b64decode(m["proof"], "proof"),
            _parse_extensions(m["extensions"]),
        )


@dataclass(frozen=True)
class ServerFinalMessage:
    """``v=<server signature>`` on success, ``e=<server-error-value>`` on failure."""

    server_signature: bytes | None = None
    error: str | None = None

    def to_bytes(self) -> bytes:
        if self.error is not None:
            return f"e={self.error}".encode()
        return f"v={_b64(self.server_signature or b'')}".encode()

    @classmethod
    def parse(cls, data: bytes) -> ServerFinalMessage:
        m = _fullmatch(_SERVER_FINAL, _text(data))
        if m is None:
            raise ScramError("invalid SCRAM server final message")
        if m["error"] is not None:
            return cls(error=m["error"])
        return cls(server_signature=_b64decode(m["verifier"], "server signature"))
