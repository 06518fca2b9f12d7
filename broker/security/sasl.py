"""The server side of SASL: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured JWTs),
as Kafka's SaslServer implementations answer, and the JAAS config text they read.

Each mechanism is a small state machine over the client's tokens (sans-IO): ``evaluate``
returns the next server token, raises :class:`AuthenticationFailed` with the message the
client is sent, and sets ``principal_name`` once complete. The network side is
broker/handlers/sasl_handshake.py and sasl_authenticate.py.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import time
from dataclasses import dataclass, field

from txbroker.protocol import scram
from txbroker.storage.log_config import ConfigError

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


class AuthenticationFailed(Exception):
    """The credentials are wrong. ``args[0]`` is what the client is told (Kafka's
    message); ``user`` the name the client tried, for the log line."""

    def __init__(self, message: str, user: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.user = user
        self.reason = reason or message


def invalid_credentials(mechanism: str) -> str:
    """Kafka's answer for a SaslException: the reason stays on the server (it could say
    whether the user exists)."""
    return (f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


# -- JAAS config (as Kafka's JaasConfig reads it with java.io.StreamTokenizer) -------


@dataclass
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


_JAVA_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\x07", "v": "\x0b"}


def _tokens(text: str):
    """StreamTokenizer as JaasConfig configures it: words (letters, digits, '.', '-', '_',
    '$'), quoted strings ("..." or '...' with Java escapes), '//' and '/* */' comments;
    ('word', s), ('quoted', s), ('number', s) or ('char', c)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace() or ord(c) < 0x20:
            i += 1
        elif text.startswith("//", i) or (c == "/" and not text.startswith("/*", i)):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "\"'":
            out, i = [], i + 1
            while i < n and text[i] != c and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        m = re.match(r"[0-7]{1,3}", text[i + 1:])
                        assert m is not None
                        out.append(chr(int(m.group(0), 8) & 0xFF))
                        i += 1 + len(m.group(0))
                        continue
                    out.append(_JAVA_ESCAPES.get(nxt, nxt))
                    i += 2
                else:
                    out.append(text[i])
                    i += 1
            i += 1  # the closing quote (or the end of the line)
            yield "quoted", "".join(out)
        elif c.isdigit() or c in ".-":
            m = re.match(r"-?[0-9.]*", text[i:])
            assert m is not None
            yield "number", m.group(0) or c
            i += max(1, len(m.group(0)))
        elif c.isalpha() or c in "_$" or ord(c) >= 0xA0:
            m = re.match(r"[\w.$-]+", text[i:])
            assert m is not None
            yield "word", m.group(0)
            i += len(m.group(0))
        else:
            yield "char", c
            i += 1


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """``LoginModule flag key="value" ...;`` entries; ValueError with Kafka's message."""
    tokens = list(_tokens(text))
    entries: list[JaasEntry] = []
    pos = 0

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1] if pos <= len(tokens) else (None, None)

    while pos < len(tokens):
        kind, module = take()
        if kind not in ("word", "quoted"):
            raise ValueError("Login module not specified in JAAS config")
        kind, flag = take()
        if kind is None:
            raise ValueError("Login module control flag not specified in JAAS config")
        if str(flag).lower() not in ("required", "requisite", "sufficient", "optional"):
            raise ValueError(f"Invalid login module control flag '{flag}' in JAAS config")
        options: dict[str, str] = {}
        while True:
            kind, key = take()
            if kind is None or (kind == "char" and key == ";"):
                break
            eq_kind, eq = take()
            v_kind, value = take()
            if eq_kind != "char" or eq != "=" or v_kind not in ("word", "quoted"):
                raise ValueError(f"Value not specified for key '{key}' in JAAS config")
            options[str(key)] = value
        if kind is None:
            raise ValueError("JAAS config entry not terminated by semi-colon")
        entries.append(JaasEntry(str(module), str(flag).lower(), options))
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    return entries


# -- mechanisms ------------------------------------------------------------------------


class PlainServer:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``, checked against the
    ``user_<name>`` options of PlainLoginModule."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.principal_name: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        text = token.decode("utf-8", errors="replace")
        parts = text.split("\x00", 3)
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified", user)
        expected = self.users.get(user)
        # Compared in constant time whether or not the user exists.
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" + password).encode())
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password", user)
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization "
                                       "id that is different from username", user)
        self.principal_name = user
        return b""


class ScramServer:
    """RFC 5802 server: client-first -> server-first -> client-final -> server-final.
    The server holds salted keys only, so its cost per attempt is a few HMACs; an unknown
    user fails at the first message, as in Kafka (no PBKDF2 on the server either way)."""

    def __init__(self, mechanism: str, credentials) -> None:
        self.mechanism = mechanism
        self.mech = scram.mechanism(mechanism)
        self.credentials = credentials  # ScramCredentialStore
        self.principal_name: str | None = None
        self._state = "first"
        self._user: str | None = None
        self._first: scram.ClientFirstMessage | None = None
        self._server_first: scram.ServerFirstMessage | None = None
        self._credential: scram.ScramCredential | None = None

    def _fail(self, reason: str) -> AuthenticationFailed:
        self._state = "failed"
        return AuthenticationFailed(invalid_credentials(self.mechanism), self._user, reason)

    def evaluate(self, token: bytes) -> bytes:
        if self._state == "first":
            try:
                first = scram.ClientFirstMessage.parse(token)
            except scram.ScramError as e:
                raise self._fail(str(e)) from None
            self._user = first.username
            if first.extensions.get("tokenauth") == "true":
                raise self._fail("delegation tokens are not supported")
            credential = self.credentials.get(first.username, self.mechanism)
            if credential is None:
                raise self._fail("Authentication failed: Invalid user credentials")
            if first.authzid and first.authzid != first.username:
                self._state = "failed"
                raise AuthenticationFailed("Authentication failed: Client requested an "
                                           "authorization id that is different from username",
                                           self._user)
            if credential.iterations < self.mech.min_iterations:
                raise self._fail(f"Iterations {credential.iterations} is less than the minimum "
                                 f"{self.mech.min_iterations} for {self.mechanism}")
            self._first, self._credential = first, credential
            self._server_first = scram.ServerFirstMessage(
                first.nonce + scram.generate_nonce(), credential.salt, credential.iterations)
            self._state = "final"
            return self._server_first.to_bytes()
        if self._state == "final":
            assert self._first is not None and self._server_first is not None
            assert self._credential is not None
            try:
                final = scram.ClientFinalMessage.parse(token)
            except scram.ScramError as e:
                raise self._fail(str(e)) from None
            # endswith, as Kafka checks: librdkafka 1.x sends the client nonce twice.
            if not final.nonce.endswith(self._server_first.nonce):
                raise self._fail("Invalid client nonce in the final client message.")
            auth = scram.auth_message(self._first.bare(), self._server_first.to_bytes(),
                                      final.without_proof())
            if not scram.verify_client_proof(self.mech, self._credential.stored_key, auth, final.proof):
                raise self._fail("Invalid client credentials")
            signature = scram.server_signature(self.mech, self._credential.server_key, auth)
            self._state = "complete"
            self.principal_name = self._user
            return scram.ServerFinalMessage(server_signature=signature).to_bytes()
        raise AuthenticationFailed(invalid_credentials(self.mechanism), self._user,
                                   f"unexpected SCRAM token in state {self._state}")


_OAUTH_INITIAL = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01",
    re.DOTALL)
_BEARER = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


def _b64url_json(part: str, what: str) -> dict:
    try:
        data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(data)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(f"the JWT {what} is not base64url JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"the JWT {what} is not a JSON object")
    return value


class OAuthBearerServer:
    """RFC 7628 with unsecured JWTs (``alg: none``), as Kafka's
    OAuthBearerUnsecuredValidatorCallbackHandler checks them: the principal claim
    (``sub``) a string, ``exp`` required and in the future, ``iat`` (if present) not in
    the future, ``exp`` after ``iat``, the required scope present. An invalid token is
    answered with the JSON error challenge; the client's ``\\x01`` then fails it."""

    mechanism = "OAUTHBEARER"

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.principal_name: str | None = None
        self._error: str | None = None

    def _option(self, name: str, default: str) -> str:
        value = self.options.get("unsecuredValidator" + name, "").strip()
        return value or default

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise AuthenticationFailed(self._error, None, "invalid token")
        self._error = None
        text = token.decode("utf-8", errors="replace")
        m = _OAUTH_INITIAL.fullmatch(text)
        if m is None:
            raise AuthenticationFailed(invalid_credentials(self.mechanism), None,
                                       "invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in m["kvpairs"].split("\x01") if p)
        bearer = _BEARER.fullmatch(pairs.get("auth", ""))
        if bearer is None or bearer["scheme"] != "Bearer":
            raise AuthenticationFailed(invalid_credentials(self.mechanism), None,
                                       "invalid scheme or token in OAUTHBEARER client first message")
        try:
            principal = self._validate(bearer["token"])
        except ValueError as e:
            scope = getattr(e, "scope", None)
            status = "insufficient_scope" if scope is not None else "invalid_token"
            self._error = (json.dumps({"status": status}, separators=(",", ":"))[:-1]
                           + (f', "scope":"{scope}"' if scope is not None else "") + "}")
            self.reason = str(e)
            return self._error.encode()
        authzid = m["authzid"] or ""
        if authzid and authzid != principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is "
                f"different from the token's principal name ({principal})", principal)
        self.principal_name = principal
        return b""

    def _validate(self, jwt: str) -> str:
        parts = jwt.split(".")
        if len(parts) != 3:
            raise ValueError("an unsecured JWT has three parts")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none" or parts[2]:
            raise ValueError("only unsecured JWTs (alg none, no signature) are accepted")
        claims = _b64url_json(parts[1], "claims")
        claim = self._option("PrincipalClaimName", "sub")
        principal = claims.get(claim)
        if principal is None:
            raise ValueError(f"Required claim missing: {claim}")
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"The {claim} claim had the incorrect type: "
                             f"{type(principal).__name__}")
        try:
            skew_ms = int(self._option("AllowableClockSkewMs", "0"))
        except ValueError:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs is not an integer") from None
        # Milliseconds, as Kafka's OAuthBearerValidationUtils compares them.
        now = int(time.time() * 1000) / 1000
        skew = skew_ms / 1000
        iat, exp = claims.get("iat"), claims.get("exp")
        if iat is not None:
            if not isinstance(iat, (int, float)) or isinstance(iat, bool):
                raise ValueError("The iat claim had the incorrect type")
            if iat > now + skew:
                raise ValueError(f"The Issued At value ({iat} seconds) was after the indicated "
                                 f"time ({now} seconds) plus allowable clock skew ({skew_ms} ms)")
        if exp is None:
            raise ValueError("Required claim missing: exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise ValueError("The exp claim had the incorrect type")
        if now - skew >= exp:
            raise ValueError(f"The indicated time ({now} seconds) minus allowable clock skew "
                             f"({skew_ms} ms) was on or after the Expiration Time value ({exp} "
                             f"seconds)")
        if iat is not None and exp <= iat:
            raise ValueError(f"The Expiration Time time ({exp} seconds) was not after the "
                             f"Issued At time ({iat} seconds)")
        required = self._option("RequiredScope", "").split()
        if required:
            scope_claim = claims.get(self._option("ScopeClaimName", "scope"))
            scopes = scope_claim.split() if isinstance(scope_claim, str) else (
                scope_claim if isinstance(scope_claim, list) else [])
            missing = [s for s in required if s not in scopes]
            if missing:
                err = ValueError(f"The provided scope ({scopes}) was missing a required scope "
                                 f"({missing[0]})")
                err.scope = " ".join(required)  # type: ignore[attr-defined]
                raise err
        return principal


# -- per listener: which mechanisms, whose users ---------------------------------------


@dataclass
class ListenerSasl:
    """What one SASL listener accepts: enabled mechanisms and their server configs."""

    listener: str
    mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth_options: dict[str, str] = field(default_factory=dict)

    def server_for(self, mechanism: str, credentials):
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism in scram.MECHANISMS:
            return ScramServer(mechanism, credentials)
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.oauth_options)
        raise KeyError(mechanism)


def _module_options(config, listener: str, mechanism: str, module_suffix: str) -> dict[str, str]:
    text, key = config.jaas_config(listener, mechanism)
    if not text:
        return {}
    try:
        entries = parse_jaas_config(text)
    except ValueError as e:
        raise ConfigError(f"listener {listener}: {key}: {e}") from None
    for entry in entries:
        if entry.login_module.endswith(module_suffix):
            return entry.options
    return {}


def listener_sasl(config, listener: str) -> ListenerSasl:
    """The SASL setup of one SASL listener; ConfigError (one line) when it ends up with no
    mechanism txbroker supports."""
    enabled = config.for_listener(listener, "sasl.enabled.mechanisms")
    source = config.listener_source(listener, "sasl.enabled.mechanisms")
    supported = [m for m in enabled if m in SUPPORTED_MECHANISMS]
    if not supported:
        raise ConfigError(
            f"listener {listener} is a SASL listener but sasl.enabled.mechanisms "
            f"({', '.join(enabled) or 'empty'}; {source}) names no mechanism txbroker supports: "
            f"set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and/or OAUTHBEARER")
    result = ListenerSasl(listener, supported)
    if "PLAIN" in supported:
        options = _module_options(config, listener, "PLAIN", "PlainLoginModule")
        result.plain_users = {k[5:]: v for k, v in options.items() if k.startswith("user_")}
    if "OAUTHBEARER" in supported:
        result.oauth_options = _module_options(config, listener, "OAUTHBEARER", "OAuthBearerLoginModule")
    return result
