"""TLS for SSL and SASL_SSL listeners: the server's SSLContext from Kafka's ssl.* keys,
and the principal of a client certificate (its subject as Java's
``X500Principal.getName()`` writes it, through ``ssl.principal.mapping.rules``)."""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from txbroker.storage.log_config import ConfigError

# -- ssl.principal.mapping.rules (Kafka's SslPrincipalMapper) -----------------------

# One rule: DEFAULT, or RULE:pattern/replacement/ with L or U after it; '\' escapes a
# '/' (or any character) inside pattern and replacement. Rules are separated by ','.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class NoMatchingRule(Exception):
    """No ssl.principal.mapping.rules rule applies to a certificate's subject."""


@dataclass(frozen=True)
class PrincipalRule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _java_replacement(replacement: str, groups: int) -> Callable[[re.Match], str]:
    """Java's Matcher replacement syntax as a re.sub function: ``$n`` is a group (more
    digits are taken while the number stays a group), ``\\c`` is the character c; a
    ``$n`` naming no group is kept as text, as Kafka's mapper arranges."""
    parts: list[str | int] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            parts.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            ref = int(replacement[i + 1])
            if ref > groups:
                parts.append(replacement[i:i + 2])
                i += 2
                continue
            i += 2
            while i < len(replacement) and replacement[i].isdigit() and ref * 10 + int(replacement[i]) <= groups:
                ref = ref * 10 + int(replacement[i])
                i += 1
            parts.append(ref)
        else:
            parts.append(c)
            i += 1

    def expand(m: re.Match) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

    return expand


def parse_principal_mapping_rules(text: str) -> list[PrincipalRule]:
    """Kafka's rule syntax; ValueError for a rule that does not parse."""
    rules: list[PrincipalRule] = []
    for m in _RULE_SPLITTER.finditer(str(text or "DEFAULT").strip()):
        rule = m.group(1)
        if not rule and m.end() >= len(text.strip()):
            break
        parsed = _RULE_PARSER.match(rule)
        if parsed is None or parsed.end() != len(rule):
            raise ValueError(f"invalid ssl.principal.mapping.rules rule: {rule!r}")
        if parsed.group(1):
            rules.append(PrincipalRule(None))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as e:
                raise ValueError(f"invalid pattern in ssl.principal.mapping.rules rule "
                                 f"{rule!r}: {e}") from None
            rules.append(PrincipalRule(pattern, parsed.group(3), parsed.group(4)))
        elif parsed.group(5):
            raise ValueError(f"invalid ssl.principal.mapping.rules rule: {rule!r}")
        if m.end() >= len(text.strip()):
            break
    return rules


class PrincipalMapper:
    def __init__(self, rules_text: str) -> None:
        self.rules_text = rules_text
        self.rules = parse_principal_mapping_rules(rules_text)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r} "
                             f"(rules {self.rules_text!r})")


# -- the subject DN as X500Principal.getName() (RFC 2253) writes it ------------------

# OpenSSL's long names (what ssl.getpeercert() gives) -> RFC 2253 keywords.
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
# Other attributes are written as OID=#<DER hex>: their OID and usual ASN.1 string type.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),  # IA5String
    "serialNumber": ("2.5.4.5", 0x13),  # PrintableString
    "dnQualifier": ("2.5.4.46", 0x13),
    "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C), "title": ("2.5.4.12", 0x0C),
    "initials": ("2.5.4.43", 0x0C), "generationQualifier": ("2.5.4.44", 0x0C),
    "pseudonym": ("2.5.4.65", 0x0C), "businessCategory": ("2.5.4.15", 0x0C),
    "postalCode": ("2.5.4.17", 0x0C), "name": ("2.5.4.41", 0x0C),
}
# What X500Principal.getName() (sun.security.x509.AVA.toRFC2253String) escapes anywhere
# in a value; leading and trailing spaces are escaped too, NUL is written \00.
_RFC2253_SPECIAL = set(',=+<>#;"\\')


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    n = len(data)
    length = bytes([n]) if n < 0x80 else (lambda b: bytes([0x80 | len(b)]) + b)(
        n.to_bytes((n.bit_length() + 7) // 8, "big"))
    return "#" + (bytes([tag]) + length + data).hex()


def _escape(value: str) -> str:
    out = []
    for c in value:
        if c in _RFC2253_SPECIAL:
            out.append("\\" + c)
        elif c == "\x00":
            out.append("\\00")
        else:
            out.append(c)
    text = "".join(out)
    stripped = text.lstrip(" \r")
    lead = len(text) - len(stripped)
    core = stripped.rstrip(" \r")
    trail = stripped[len(core):]
    return "".join("\\" + c for c in text[:lead]) + core + "".join("\\" + c for c in trail)


def rfc2253_name(subject: tuple) -> str:
    """``ssl.SSLSocket.getpeercert()['subject']`` (RDNs, most significant first) as an
    RFC 2253 string, last RDN first: ``CN=alice,OU=eng,O=Example,C=US``."""
    rdns = []
    for rdn in reversed(subject):
        avas = []
        for attr, value in rdn:
            if attr in _KEYWORDS:
                avas.append(f"{_KEYWORDS[attr]}={_escape(value)}")
            else:
                oid, tag = _OIDS.get(attr, (attr, 0x0C))
                avas.append(f"{oid}={_der_hex(tag, value)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


# -- the server's SSLContext ---------------------------------------------------------


def _pkcs12(path: str, password: str, what: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(f"{what}: PKCS12 stores need the 'cryptography' package "
                          f"(pip install cryptography), or use PEM") from None
    try:
        with open(path, "rb") as f:
            return pkcs12.load_key_and_certificates(f.read(), password.encode() or None)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ConfigError(f"{what}: cannot open PKCS12 store {path}: {e}") from None


def _load_chain_pem(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """load_cert_chain reads only files: inline PEM goes through a private temporary file,
    removed at once."""
    fd, path = tempfile.mkstemp(prefix="txbroker-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def server_context(config, listener: str) -> ssl.SSLContext:
    """The SSLContext of one TLS listener (listener.name.<listener>.ssl.* over ssl.*);
    ConfigError naming the key for anything missing or unreadable."""

    def get(key: str):
        return config.for_listener(listener, key)

    def where(key: str) -> str:
        return f"listener {listener}: {config.listener_source(listener, key)}"

    protocols = [p for p in get("ssl.enabled.protocols") if p in ("TLSv1.2", "TLSv1.3")]
    if not protocols:
        raise ConfigError(f"{where('ssl.enabled.protocols')}: no TLS version txbroker serves "
                          f"(TLSv1.2, TLSv1.3)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2 if "TLSv1.2" in protocols else ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3 if "TLSv1.3" in protocols else ssl.TLSVersion.TLSv1_2
    if get("ssl.cipher.suites"):
        try:
            ctx.set_ciphers(":".join(get("ssl.cipher.suites")))
        except ssl.SSLError as e:
            raise ConfigError(f"{where('ssl.cipher.suites')}: {e}") from None

    key_password = get("ssl.key.password") or None
    store_type = get("ssl.keystore.type")
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    try:
        if store_type == "PEM" and location:
            ctx.load_cert_chain(location, password=key_password)
        elif store_type == "PEM" and chain and key:
            _load_chain_pem(ctx, chain, key, key_password)
        elif store_type == "PKCS12" and location:
            from cryptography.hazmat.primitives import serialization

            pkey, cert, extra = _pkcs12(location, get("ssl.keystore.password"), where("ssl.keystore.location"))
            if pkey is None or cert is None:
                raise ConfigError(f"{where('ssl.keystore.location')}: {location} holds no key and certificate")
            pem = lambda c: c.public_bytes(serialization.Encoding.PEM).decode()  # noqa: E731
            _load_chain_pem(ctx, "".join(pem(c) for c in [cert, *(extra or [])]),
                            pkey.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode(), None)
        elif store_type == "JKS":
            raise ConfigError(f"{where('ssl.keystore.type')}: JKS key stores are not supported; "
                              f"set ssl.keystore.type=PEM (or PKCS12)")
        else:
            raise ConfigError(f"listener {listener} ({store_type} key store) needs "
                              f"ssl.keystore.location, or ssl.keystore.certificate.chain and "
                              f"ssl.keystore.key (ssl.keystore.type=PEM)")
    except ssl.SSLError as e:
        raise ConfigError(f"{where('ssl.keystore.location')}: cannot load the key and "
                          f"certificate: {e.reason or e}") from None
    except OSError as e:
        raise ConfigError(f"{where('ssl.keystore.location')}: cannot read {location}: "
                          f"{e.strerror or e}") from None

    client_auth = get("ssl.client.auth")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[client_auth]
    trust_type = get("ssl.truststore.type")
    trust_location, trust_inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if trust_type == "PKCS12" and trust_location:
            from cryptography.hazmat.primitives import serialization

            _key, cert, extra = _pkcs12(trust_location, get("ssl.truststore.password"),
                                        where("ssl.truststore.location"))
            certs = [c for c in [cert, *(extra or [])] if c is not None]
            ctx.load_verify_locations(cadata="".join(
                c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
        elif trust_location:
            ctx.load_verify_locations(cafile=trust_location)
        elif trust_inline:
            ctx.load_verify_locations(cadata=trust_inline)
        elif client_auth != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # as Kafka falls back to the JVM's
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError(f"{where('ssl.truststore.location')}: cannot load the trust store: "
                          f"{getattr(e, 'strerror', None) or e}") from None
    return ctx
