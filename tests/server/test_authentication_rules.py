"""The authentication package's rules without sockets: SCRAM (RFC 7677's example exchange,
Kafka's stored form), PLAIN, OAUTHBEARER's unsecured tokens, the SASL state machine's table
(re-authentication included), principal mapping, JAAS values, listener rules, the properties
reader and the SCRAM admin rules, one test per named branch."""

import base64
import json

import pytest

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.connection import decode_response, encode_request
from kqlite.protocol.security import SecurityProtocol
from kqlite.server import listeners as L
from kqlite.server.authentication import (credential_changes, jaas, oauthbearer, plain,
                                          scram, scram_server)
from kqlite.server.authentication.listener_security import SecurityConfigError, build_listeners
from kqlite.server.authentication.mechanism import AuthenticationFailed, CredentialsRejected
from kqlite.server.authentication.principal_mapping import (NoMatchingRule, PrincipalMapper,
                                                            distinguished_name)
from kqlite.server.authentication.sasl_client import ScramClient
from kqlite.server.authentication.sasl_server import Next, SaslServerAuthenticator, State
from kqlite.cli.server_properties import PropertiesError, check_keys, read_properties
from kqlite.cli.serve_settings import SETTINGS

SHA256 = scram.MECHANISMS["SCRAM-SHA-256"]
SECRET = b"s" * 32


# -- SCRAM -------------------------------------------------------------------------------

def test_rfc7677_example_exchange():
    """RFC 7677 section 3: user "user", password "pencil", the RFC's nonces and salt."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.make_credential(SHA256, "pencil", 4096, salt)
    server = scram_server.ScramServer(SHA256, lambda m, u: credential, SECRET)
    server_first = server.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", 0)
    assert server_first.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and \
        server_first.endswith(b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.first()
    final = server.respond(client.respond(server_first), 0)
    assert server.complete and server.principal_name == "user"
    client.respond(final)
    assert client.complete


def test_rfc7677_client_proof():
    # The RFC's own client-final proof for its fixed server nonce.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(SHA256, "pencil", salt, 4096)
    auth = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert scram.b64(scram.client_proof(SHA256, salted, auth)) == \
        "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    assert scram.b64(scram.server_signature(SHA256, SHA256.hmac(salted, b"Server Key"), auth)) \
        == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_stored_form_round_trips_and_refuses_other_keys():
    credential = scram.make_credential(SHA256, "pw")
    text = credential.to_text()
    assert text.startswith("salt=") and text.endswith(",iterations=4096")
    assert scram.ScramCredential.from_text(text) == credential
    for bad in (text + ",extra=1", text.replace("iterations=4096", "iterations=x"), "salt=a"):
        with pytest.raises(scram.ScramFormatError):
            scram.ScramCredential.from_text(bad)


def test_salts_are_kafkas_base36_text():
    assert scram.random_salt().isalnum() and scram.random_salt() != scram.random_salt()


def test_names_escape_comma_and_equals():
    assert scram.encode_name("a,b=c") == "a=2Cb=3Dc"
    assert scram.decode_name("a=2Cb=3Dc") == "a,b=c"
    first = scram.parse_client_first(b"n,,n=a=2Cb,r=abc")
    assert first.user == "a,b"


@pytest.mark.parametrize("message", [b"p=tls-unique,,n=u,r=x", b"n,,n=u=xx,r=abc",
                                     b"n,,n=,r=abc", b"n,,n=u,r=a,b", b"n,,n=\xc3\xa9,r=x"])
def test_client_first_grammar_refusals(message):
    with pytest.raises(scram.ScramFormatError):
        scram.parse_client_first(message)


def _scram_exchange(lookup=lambda m, u: None, user="u"):
    server = scram_server.ScramServer(SHA256, lookup, SECRET)
    first = ScramClient(SHA256, user, "pw")
    return server, first, server.respond(first.first(), 0)


def test_scram_refuses_an_authzid_other_than_the_user():
    server = scram_server.ScramServer(SHA256, lambda m, u: None, SECRET)
    with pytest.raises(CredentialsRejected, match="authorization id"):
        server.respond(b"n,a=admin,n=u,r=abc", 0)


def test_scram_refuses_delegation_tokens():
    server = scram_server.ScramServer(SHA256, lambda m, u: None, SECRET)
    with pytest.raises(CredentialsRejected, match="delegation"):
        server.respond(b"n,,n=u,r=abc,tokenauth=true", 0)


def test_scram_refuses_a_nonce_of_another_exchange():
    server, client, server_first = _scram_exchange()
    nonce = scram.parse_server_first(server_first).nonce.encode()
    final = client.respond(server_first).replace(nonce, nonce[:-1] + b"~")
    with pytest.raises(CredentialsRejected, match="nonce"):
        server.respond(final, 0)


def test_scram_treats_too_few_stored_iterations_as_unknown():
    weak = scram.make_credential(SHA256, "pw", 1024)
    server, client, server_first = _scram_exchange(lambda m, u: weak)
    assert b"i=4096" in server_first
    with pytest.raises(CredentialsRejected, match="Invalid client credentials"):
        server.respond(client.respond(server_first), 0)


def test_scram_refuses_a_message_after_the_end():
    credential = scram.make_credential(SHA256, "pw")
    server, client, server_first = _scram_exchange(lambda m, u: credential)
    server.respond(client.respond(server_first), 0)
    with pytest.raises(CredentialsRejected, match="unexpected"):
        server.respond(b"again", 0)


def test_an_unknown_users_credential_depends_on_the_secret_and_the_name_only():
    one = scram_server.unknown_user_credential(SHA256, SECRET, "mallory")
    assert one == scram_server.unknown_user_credential(SHA256, SECRET, "mallory")
    assert one != scram_server.unknown_user_credential(SHA256, b"t" * 32, "mallory")
    assert one.iterations == 4096 and one.salt.isalnum()


# -- PLAIN -------------------------------------------------------------------------------

@pytest.mark.parametrize("token,error,text", [
    (b"\0alice", CredentialsRejected, "expected 3 tokens"),
    (b"\0\0pw", AuthenticationFailed, "username not specified"),
    (b"\0alice\0", AuthenticationFailed, "password not specified"),
    (b"bob\0alice\0pw", AuthenticationFailed, "different from username"),
    (b"\0alice\0wrong", AuthenticationFailed, "Invalid username or password"),
    (b"\0mallory\0pw", AuthenticationFailed, "Invalid username or password"),
    (b"\0\xff\0pw", CredentialsRejected, "not UTF-8"),
])
def test_plain_refusals(token, error, text):
    with pytest.raises(error, match=text):
        plain.PlainServer({"alice": "pw"}).respond(token, 0)


def test_plain_accepts_an_authzid_equal_to_the_user():
    server = plain.PlainServer({"alice": "pw"})
    assert server.respond(b"alice\0alice\0pw", 0) == b"" and server.principal_name == "alice"


# -- OAUTHBEARER -------------------------------------------------------------------------

def _bearer(token, authzid=""):
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


NOW_S = 1_700_000_000


def test_oauthbearer_accepts_an_unsecured_token_and_its_expiry_bounds_the_session():
    server = oauthbearer.OAuthBearerServer({})
    token = oauthbearer.unsecured_token("alice", lifetime_s=60, issued_at_s=NOW_S)
    assert server.respond(_bearer(token), NOW_S * 1000) == b""
    assert server.principal_name == "alice" and server.expiry_ms == (NOW_S + 60) * 1000


@pytest.mark.parametrize("claims,options,status", [
    ({"sub": "a", "exp": NOW_S - 10}, {}, "invalid_token"),
    ({"sub": "a"}, {}, "invalid_token"),
    ({"exp": NOW_S + 60}, {}, "invalid_token"),
    ({"sub": "a", "exp": NOW_S + 60, "iat": NOW_S + 600}, {}, "invalid_token"),
    ({"sub": "a", "exp": NOW_S + 60, "scope": "x"},
     {"unsecuredValidatorRequiredScope": "y"}, "insufficient_scope"),
])
def test_oauthbearer_refused_tokens_get_the_json_challenge_then_fail(claims, options, status):
    def part(doc):
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    server = oauthbearer.OAuthBearerServer(options)
    challenge = server.respond(_bearer(f"{part({'alg': 'none'})}.{part(claims)}."),
                               NOW_S * 1000)
    assert json.loads(challenge)["status"] == status
    with pytest.raises(AuthenticationFailed, match=status):
        server.respond(b"\x01", NOW_S * 1000)


def test_oauthbearer_refuses_a_signed_token_and_a_bad_message():
    server = oauthbearer.OAuthBearerServer({})
    assert b"invalid_token" in server.respond(_bearer("a.b.c"), 0)
    with pytest.raises(CredentialsRejected):
        oauthbearer.OAuthBearerServer({}).respond(b"n,,auth=Bearer x", 0)


def test_oauthbearer_refuses_an_authzid_other_than_the_principal():
    token = oauthbearer.unsecured_token("alice", issued_at_s=NOW_S)
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        oauthbearer.OAuthBearerServer({}).respond(_bearer(token, "bob"), NOW_S * 1000)


# -- The SASL state machine --------------------------------------------------------------

VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.SASL_HANDSHAKE: (0, 1),
            ApiKey.SASL_AUTHENTICATE: (0, 2)}


def _frame(api_key, version, body):
    return encode_request(api_key, version, 1, "t", body)[4:]


def _answer(step, api_key, version):
    return decode_response(api_key, version, step.send[0][4:] if len(step.send) == 1
                           else b"".join(step.send)[4:])[1]


def _plain(users=None, reauth_ms=0):
    return SaslServerAuthenticator({"PLAIN": lambda: plain.PlainServer(users or {"a": "p"})},
                                   VERSIONS, reauth_ms={"PLAIN": reauth_ms})


def test_the_table_names_every_framed_state():
    from kqlite.server.authentication.sasl_server import TRANSITIONS
    assert set(TRANSITIONS) == {State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE,
                                State.AUTHENTICATE}


def test_success_gives_the_principal_and_the_session_lifetime():
    auth = _plain(reauth_ms=5000)
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0a\0p"}), 0)
    assert step.next is Next.COMPLETE and step.principal_name == "a"
    assert step.session_lifetime_ms == 5000
    assert _answer(step, ApiKey.SASL_AUTHENTICATE, 1)["session_lifetime_ms"] == 5000


def test_a_failure_waits_then_closes():
    auth = _plain()
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0a\0x"}), 0)
    assert step.next is Next.FAIL and auth.state is State.FAILED
    assert _answer(step, ApiKey.SASL_AUTHENTICATE, 2)["error_code"] == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_nothing_is_read_in_the_final_states():
    auth = _plain()
    auth.state = State.COMPLETE
    assert auth.receive(b"\0\x12", 0).next is Next.CLOSE


def test_an_unsupported_sasl_authenticate_version_closes_unanswered():
    auth = _plain()
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    frame = bytearray(_frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b""}))
    frame[2:4] = (9).to_bytes(2, "big")
    step = auth.receive(bytes(frame), 0)
    assert step.next is Next.CLOSE and not step.send


def test_a_short_frame_closes():
    assert _plain().receive(b"\0", 0).next is Next.CLOSE


def test_reauthentication_keeps_the_mechanism_and_the_principal():
    auth = SaslServerAuthenticator.reauthenticating(
        {"PLAIN": lambda: plain.PlainServer({"a": "p", "b": "q"})}, VERSIONS, reauth_ms={},
        mechanism="PLAIN", principal_name="a")
    step = auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 0)
    assert step.next is Next.CONTINUE
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0b\0q"}), 0)
    assert step.next is Next.FAIL
    assert "Cannot change principals" in _answer(step, ApiKey.SASL_AUTHENTICATE, 2)[
        "error_message"]


def test_reauthentication_with_another_mechanism_is_refused():
    auth = SaslServerAuthenticator.reauthenticating(
        {"PLAIN": lambda: plain.PlainServer({}), "SCRAM-SHA-256": lambda: None}, VERSIONS,
        reauth_ms={}, mechanism="PLAIN", principal_name="a")
    step = auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}), 0)
    assert step.next is Next.CLOSE
    assert _answer(step, ApiKey.SASL_HANDSHAKE, 1)["mechanisms"] == ["PLAIN"]


def test_the_session_lifetime_is_the_smaller_of_reauth_and_the_credentials():
    token = oauthbearer.unsecured_token("a", lifetime_s=2, issued_at_s=NOW_S)
    auth = SaslServerAuthenticator({"OAUTHBEARER": lambda: oauthbearer.OAuthBearerServer({})},
                                   VERSIONS, reauth_ms={"OAUTHBEARER": 60000})
    auth.receive(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}), 0)
    step = auth.receive(_frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": _bearer(token)}),
                        NOW_S * 1000)
    assert step.session_lifetime_ms == 2000


# -- Principal mapping, JAAS, listeners, properties --------------------------------------

SUBJECT = ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
           (("organizationalUnitName", "eng"),), (("commonName", "Alice"),))


def test_the_dn_is_rfc2253_most_specific_first_with_escapes():
    assert distinguished_name(SUBJECT) == "CN=Alice,OU=eng,O=Acme\\, Inc,C=US"


def test_mapping_rules_first_match_wins_with_case_folding():
    mapper = PrincipalMapper("RULE:^CN=([^,]+),OU=ops.*$/$1-ops/,RULE:^CN=([^,]+),.*$/$1/L,DEFAULT")
    assert mapper.name("CN=Alice,OU=eng,O=Acme\\, Inc,C=US") == "alice"
    assert mapper.name("CN=Bob,OU=ops,C=US") == "Bob-ops"
    assert PrincipalMapper().name("CN=x") == "CN=x"


def test_no_matching_rule_refuses_and_a_bad_rule_is_a_config_error():
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(x)$/$1/").name("CN=y")
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:broken")


def test_jaas_entry_with_quoted_values_and_its_refusals():
    entry = jaas.parse_jaas('org.x.PlainLoginModule required username="a b" '
                            'user_a="p\\"q" debug=true;')
    assert entry.options == {"username": "a b", "user_a": 'p"q', "debug": "true"}
    for bad in ("m required", "m maybe;", "m required a=1; n required;", "m required a;"):
        with pytest.raises(jaas.JaasError):
            jaas.parse_jaas(bad)


@pytest.mark.parametrize("properties,key", [
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners"),
    ({"listeners": "PLAINTEXT://:1,SSL://:1"}, "listeners"),
    ({"listeners": "FOO://:1"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT:1"}, "listeners"),
    ({"listeners": "PLAINTEXT://:70000"}, "listeners"),
    ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://h:1"},
     "advertised.listeners"),
    ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "PLAINTEXT://0.0.0.0:1"},
     "advertised.listeners"),
    ({"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "PLAINTEXT:TLS"},
     "listener.security.protocol.map"),
    ({"listeners": "SASL_PLAINTEXT://:1"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://:1", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listeners": "SSL://:1"}, "ssl.keystore.location"),
    ({"listeners": "SSL://:1", "ssl.keystore.type": "JKS", "ssl.keystore.location": "/x"},
     "ssl.keystore.location"),
    ({"listeners": "SSL://:1", "ssl.keystore.location": "/nonexistent"},
     "ssl.keystore.location"),
])
def test_listener_configurations_kafka_refuses(properties, key):
    with pytest.raises(SecurityConfigError) as refused:
        build_listeners(properties)
    assert refused.value.key == key


def test_ipv4_and_ipv6_listeners_may_share_a_port():
    endpoints = L.parse_endpoints("A://127.0.0.1:9,B://[::1]:9", {"A": SecurityProtocol.PLAINTEXT,
                                                                 "B": SecurityProtocol.SSL})
    assert L.check_listeners(endpoints)[1].host == "::1"
    assert str(endpoints[1]) == "B://[::1]:9"


def test_the_inter_broker_listener_rules():
    advertised = L.parse_endpoints("INTERNAL://h:1,EXTERNAL://h:2", {
        "INTERNAL": SecurityProtocol.SASL_PLAINTEXT, "EXTERNAL": SecurityProtocol.SSL})
    assert L.inter_broker_listener(advertised, "internal").listener_name == "INTERNAL"
    assert L.inter_broker_listener(advertised, protocol="SSL").listener_name == "EXTERNAL"
    for name, protocol in (("NONE", None), ("INTERNAL", "SSL"), (None, "PLAINTEXT")):
        with pytest.raises(L.ListenerConfigError):
            L.inter_broker_listener(advertised, name, protocol)


def test_properties_are_read_as_java_reads_them():
    text = "# comment\n! also\na=1\nb : 2\nc 3\nd=x\\\n   y\ne=\\u0041\\=\\t\n"
    assert read_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "A=\t"}


@pytest.mark.parametrize("key,known", [
    ("broker.id", True), ("listener.name.sasl_ssl.ssl.keystore.location", True),
    ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", True),
    ("listener.name.sasl_ssl.plain.connections.max.reauth.ms", True),
    ("listener.name.sasl_ssl.connections.max.reauth.ms", True),
    ("sasl.jaas.config", True), ("num.network.threads", True),
    ("listener.name.sasl_ssl.sasl.jaas.config", False),
    ("listener.name.sasl_ssl.gssapi.sasl.jaas.config", False),
    ("listener.name.sasl_ssl.broker.id", False), ("log.retention.hourz", False),
])
def test_property_keys_are_checked_against_the_settings(key, known):
    mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    if known:
        check_keys({key: "x"}, SETTINGS, mechanisms)
    else:
        with pytest.raises(PropertiesError) as refused:
            check_keys({key: "x"}, SETTINGS, mechanisms)
        assert refused.value.key == key


# -- SCRAM administration ----------------------------------------------------------------

def _upsert(name, mechanism=1, iterations=4096):
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": b"salt",
            "salted_password": b"x" * 32}


@pytest.mark.parametrize("body,code", [
    ({"deletions": [], "upsertions": [_upsert("")]}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ({"deletions": [], "upsertions": [_upsert("a", mechanism=9)]},
     ErrorCode.UNSUPPORTED_SASL_MECHANISM),
    ({"deletions": [], "upsertions": [_upsert("a", iterations=4095)]},
     ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ({"deletions": [], "upsertions": [_upsert("a", iterations=16385)]},
     ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ({"deletions": [{"name": "a", "mechanism": 1}], "upsertions": [_upsert("a")]},
     ErrorCode.DUPLICATE_RESOURCE),
    ({"deletions": [{"name": "a", "mechanism": 2}], "upsertions": []},
     ErrorCode.RESOURCE_NOT_FOUND),
])
def test_alter_refusals_leave_the_user_unchanged(body, code):
    users = {"a": {"SCRAM-SHA-256": scram.make_credential(SHA256, "p").to_text()}}
    before = json.dumps(users)
    results = credential_changes.apply(users, credential_changes.plan(body))
    assert [r["error_code"] for r in results] == [code]
    assert json.dumps(users) == before


def test_alter_derives_the_keys_from_the_salted_password():
    users = {}
    results = credential_changes.apply(users, credential_changes.plan(
        {"deletions": [], "upsertions": [_upsert("a"), _upsert("b", 2)]}))
    assert [r["error_code"] for r in results] == [0, 0]
    stored = scram.ScramCredential.from_text(users["a"]["SCRAM-SHA-256"])
    assert stored == scram.credential_from_salted_password(SHA256, b"x" * 32, b"salt", 4096)


def test_describe_all_named_missing_and_duplicated():
    users = {"b": {"SCRAM-SHA-512": scram.make_credential(scram.MECHANISMS["SCRAM-SHA-512"],
                                                          "p", 8192)}}
    assert credential_changes.describe(users, None) == [
        {"user": "b", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 2, "iterations": 8192}]}]
    results = credential_changes.describe(users, [{"name": "x"}, {"name": "b"}, {"name": "b"}])
    assert [(r["user"], r["error_code"]) for r in results] == [
        ("x", ErrorCode.RESOURCE_NOT_FOUND), ("b", ErrorCode.DUPLICATE_RESOURCE)]
