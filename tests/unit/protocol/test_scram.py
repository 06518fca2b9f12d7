"""protocol/scram.py: RFC 5802/7677 primitives, checked against RFC 7677's test vector
and by round trips of a full client/server exchange."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.protocol import scram

SHA256 = scram.MECHANISMS["SCRAM-SHA-256"]
SHA512 = scram.MECHANISMS["SCRAM-SHA-512"]

# RFC 7677 section 3.
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_sha256_vector_client_side() -> None:
    first = scram.ClientFirstMessage.parse(RFC7677_CLIENT_FIRST)
    assert (first.username, first.nonce, first.authzid) == ("user", "rOprNGfwEbeRWgbNEkqO", "")
    assert first.to_bytes() == RFC7677_CLIENT_FIRST
    server_first = scram.ServerFirstMessage.parse(RFC7677_SERVER_FIRST)
    assert server_first.iterations == 4096
    assert server_first.to_bytes() == RFC7677_SERVER_FIRST
    final = scram.ClientFinalMessage(first.gs2_header.encode(), server_first.nonce)
    salted = scram.salted_password(SHA256, "pencil", server_first.salt, server_first.iterations)
    auth = scram.auth_message(first.bare(), RFC7677_SERVER_FIRST, final.without_proof())
    proof = scram.client_proof(SHA256, salted, auth)
    assert scram.ClientFinalMessage(final.channel_binding, final.nonce, proof).to_bytes() == RFC7677_CLIENT_FINAL
    signature = scram.server_signature(SHA256, scram.server_key(SHA256, salted), auth)
    assert scram.ServerFinalMessage(server_signature=signature).to_bytes() == RFC7677_SERVER_FINAL


def test_rfc7677_sha256_vector_server_side() -> None:
    server_first = scram.ServerFirstMessage.parse(RFC7677_SERVER_FIRST)
    cred = scram.make_credential(SHA256, "pencil", server_first.salt, 4096)
    final = scram.ClientFinalMessage.parse(RFC7677_CLIENT_FINAL)
    assert final.channel_binding == b"n,,"
    auth = scram.auth_message(b"n=user,r=rOprNGfwEbeRWgbNEkqO", RFC7677_SERVER_FIRST, final.without_proof())
    assert scram.verify_client_proof(SHA256, cred.stored_key, auth, final.proof)
    assert not scram.verify_client_proof(SHA256, cred.stored_key, auth, bytes(32))
    assert not scram.verify_client_proof(SHA256, cred.stored_key, auth, final.proof[:-1])
    sig = scram.server_signature(SHA256, cred.server_key, auth)
    assert scram.ServerFinalMessage.parse(RFC7677_SERVER_FINAL).server_signature == sig


def test_saslname_escaping() -> None:
    assert scram.escape_saslname("a=b,c") == "a=3Db=2Cc"
    assert scram.unescape_saslname("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(scram.ScramError):
        scram.unescape_saslname("a=4Fb")
    msg = scram.ClientFirstMessage("us,er=x", "abc", authzid="us,er=x")
    assert msg.to_bytes() == b"n,a=us=2Cer=3Dx,n=us=2Cer=3Dx,r=abc"
    assert scram.ClientFirstMessage.parse(msg.to_bytes()) == msg


def test_extensions_and_errors_round_trip() -> None:
    msg = scram.ClientFirstMessage("alice", "n0nce", extensions={"tokenauth": "true"})
    assert scram.ClientFirstMessage.parse(msg.to_bytes()).extensions == {"tokenauth": "true"}
    err = scram.ServerFinalMessage(error="invalid-proof")
    assert scram.ServerFinalMessage.parse(err.to_bytes()).error == "invalid-proof"


@pytest.mark.parametrize(
    "parse, data",
    [
        (scram.ClientFirstMessage.parse, b"y,,n=user,r=abc"),  # channel binding is not supported
        (scram.ClientFirstMessage.parse, b"n,,n=,r=abc"),
        (scram.ClientFirstMessage.parse, b"n,,n=user,r=a,bc"),
        (scram.ClientFirstMessage.parse, b"n,,n=user,r=abc\xff"),
        (scram.ServerFirstMessage.parse, b"r=abc,s=!!!,i=4096"),
        (scram.ServerFirstMessage.parse, b"r=abc,s=AAAA,i=0"),
        (scram.ServerFirstMessage.parse, b"r=abc,s=AAAA,i=99999999999"),
        (scram.ClientFinalMessage.parse, b"c=biws,r=abc"),
        (scram.ClientFinalMessage.parse, b"c=biws,r=abc,p=A"),
        (scram.ServerFinalMessage.parse, b"x=1"),
    ],
)
def test_malformed_messages_raise_scram_error(parse, data: bytes) -> None:
    with pytest.raises(scram.ScramError):
        parse(data)


def test_unknown_mechanism() -> None:
    assert scram.mechanism("SCRAM-SHA-512") is SHA512
    with pytest.raises(scram.ScramError):
        scram.mechanism("SCRAM-SHA-1")


def test_nonce_is_printable_without_comma() -> None:
    nonces = {scram.generate_nonce() for _ in range(50)}
    assert len(nonces) == 50
    assert all("," not in n and all(0x21 <= ord(c) <= 0x7E for c in n) for n in nonces)


@settings(max_examples=25, deadline=None)
@given(
    user=st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s),
    password=st.text(max_size=20),
    mech_name=st.sampled_from(sorted(scram.MECHANISMS)),
)
def test_full_exchange_round_trip(user: str, password: str, mech_name: str) -> None:
    mech = scram.mechanism(mech_name)
    cred = scram.make_credential(mech, password, iterations=scram.MIN_ITERATIONS)
    # client
    first = scram.ClientFirstMessage(user, scram.generate_nonce())
    # server
    parsed_first = scram.ClientFirstMessage.parse(first.to_bytes())
    assert parsed_first.username == user
    server_first = scram.ServerFirstMessage(parsed_first.nonce + scram.generate_nonce(), cred.salt, cred.iterations)
    # client
    sf = scram.ServerFirstMessage.parse(server_first.to_bytes())
    assert sf.nonce.startswith(first.nonce)
    salted = scram.salted_password(mech, password, sf.salt, sf.iterations)
    final = scram.ClientFinalMessage(first.gs2_header.encode(), sf.nonce)
    auth = scram.auth_message(first.bare(), server_first.to_bytes(), final.without_proof())
    final = scram.ClientFinalMessage(final.channel_binding, final.nonce, scram.client_proof(mech, salted, auth))
    # server
    pf = scram.ClientFinalMessage.parse(final.to_bytes())
    server_auth = scram.auth_message(parsed_first.bare(), server_first.to_bytes(), pf.without_proof())
    assert server_auth == auth
    assert scram.verify_client_proof(mech, cred.stored_key, server_auth, pf.proof)
    wrong = scram.client_proof(mech, scram.salted_password(mech, password + "x", sf.salt, sf.iterations), auth)
    assert not scram.verify_client_proof(mech, cred.stored_key, server_auth, wrong)
    assert base64.b64decode(final.to_bytes().rsplit(b"p=", 1)[1]) == pf.proof
