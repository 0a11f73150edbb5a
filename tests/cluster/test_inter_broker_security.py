"""A broker's connections to other brokers' secured listeners (kqlite/cluster/network/
inter_broker.py and the SASL exchange of broker_client.py), against a kqlite broker in the
same event loop: TLS checked against the listener's trust store, SCRAM, PLAIN and
OAUTHBEARER on SASL_PLAINTEXT and SASL_SSL, every refusal named, and sessions
re-authenticated on the same connection before their lifetime ends (KIP-368) while
requests keep flowing."""

import asyncio
import ssl

import pytest

from kqlite.cli.cluster_security import CertificateAuthority, scram_jaas
from kqlite.cluster.network.broker_client import (BrokerAuthenticationError,
                                                  BrokerConnectError)
from kqlite.cluster.network.inter_broker import InterBrokerListener, from_properties
from kqlite.cluster.network.sasl import SaslExchangeError, authenticate, reauthentication_delay
from kqlite.protocol import ApiKey
from kqlite.protocol.security import SecurityProtocol
from kqlite.server import Broker
from kqlite.server.authentication import credential_changes, credential_file, scram
from kqlite.server.authentication.listener_security import SecurityConfigError, build_listeners
from kqlite.server.authentication.sasl_client import PlainClient, ScramClient

pytest.importorskip("cryptography")

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
         'username="broker" password="broker-secret" user_broker="broker-secret";')
OAUTH = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
         'unsecuredLoginStringClaim_sub="broker";')


@pytest.fixture
def material(tmp_path):
    authority = CertificateAuthority(str(tmp_path))
    data = tmp_path / "data"
    data.mkdir()
    mechanism = scram.MECHANISMS["SCRAM-SHA-512"]
    planned = credential_changes.plan({"deletions": [], "upsertions": [{
        "name": "broker", "mechanism": mechanism.type_code, "iterations": 4096,
        "salt": b"salt", "salted_password": scram.salted_password(
            mechanism, "broker-secret", b"salt", 4096)}]})
    credential_file.change_credentials(str(data), lambda users: credential_changes.apply(
        users, planned))
    return {"ca": authority.ca_file,
            "keystore": authority.issue("broker", "broker", ["127.0.0.1", "localhost"]),
            "elsewhere": authority.issue("elsewhere", "elsewhere", ["elsewhere.example"]),
            "data": str(data), "other_ca": CertificateAuthority(str(tmp_path / "other")).ca_file}


def _properties(material, reauth_ms=None, password="broker-secret", mechanism="SCRAM-SHA-512"):
    props = {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.location": material["keystore"],
        "listener.name.ssl.ssl.keystore.location": material["elsewhere"],
        "ssl.truststore.location": material["ca"],
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN,OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": mechanism,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("broker", password),
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            scram_jaas("broker", password),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN,
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH,
    }
    if reauth_ms is not None:
        props["connections.max.reauth.ms"] = str(reauth_ms)
    return props


def _serve(material, scenario, **properties):
    """Run ``scenario(broker, props)`` with a broker serving ``_properties`` in this loop."""
    props = _properties(material, **properties)

    async def main():
        broker = Broker(material["data"], "127.0.0.1", 0, listeners=build_listeners(props))
        await broker.start()
        try:
            return await scenario(broker, props)
        finally:
            await broker.stop(grace=1)
    return asyncio.run(main())


def _port(broker, name):
    return broker.listener(name).endpoint.port


async def _metadata(conn):
    return await conn.request(ApiKey.METADATA, 1, {"topics": []})


@pytest.mark.parametrize("listener,mechanism", [
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "OAUTHBEARER"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512")])
def test_a_broker_connects_to_a_secured_listener(material, listener, mechanism):
    async def scenario(broker, props):
        inter = from_properties({**props, "inter.broker.listener.name": listener},
                                broker.listeners)
        assert (inter.name, inter.sasl_mechanism) == (listener, mechanism)
        assert (inter.ssl_context is not None) == (listener == "SASL_SSL")
        conn = await inter.connect("127.0.0.1", _port(broker, listener), broker_id=1)
        try:
            answer = await _metadata(conn)
            assert [b["port"] for b in answer["brokers"]] == [_port(broker, listener)]
        finally:
            await conn.close()
        return broker.metrics.failed_authentications
    assert _serve(material, scenario, mechanism=mechanism) == 0


def test_a_wrong_password_is_refused_and_says_why(material):
    async def scenario(broker, props):
        wrong = _properties(material, password="wrong")
        inter = from_properties(wrong, build_listeners(wrong))
        with pytest.raises(BrokerAuthenticationError) as refused:
            await inter.connect("127.0.0.1", _port(broker, "SASL_SSL"), broker_id=2)
        return str(refused.value), broker.metrics.failed_authentications
    text, failures = _serve(material, scenario)
    assert "cannot authenticate to broker 2" in text and "SASL_AUTHENTICATION_FAILED" in text
    assert failures == 1


def test_an_untrusted_certificate_is_refused(material):
    async def scenario(broker, props):
        inter = from_properties({**props, "ssl.truststore.location": material["other_ca"]},
                                broker.listeners)
        with pytest.raises(BrokerConnectError, match="certificate verify failed"):
            await inter.connect("127.0.0.1", _port(broker, "SASL_SSL"))
        # A certificate that names another host (the SSL listener's) fails the endpoint
        # check, unless the check is turned off (ssl.endpoint.identification.algorithm
        # empty).
        strict = from_properties({**props, "inter.broker.listener.name": "SSL"},
                                 broker.listeners)
        with pytest.raises(BrokerConnectError, match="certificate verify failed"):
            await strict.connect("127.0.0.1", _port(broker, "SSL"))
        lenient = from_properties({**props, "inter.broker.listener.name": "SSL",
                                   "ssl.endpoint.identification.algorithm": ""},
                                  broker.listeners)
        conn = await lenient.connect("127.0.0.1", _port(broker, "SSL"))
        assert (await _metadata(conn))["brokers"]
        await conn.close()
    _serve(material, scenario)


def test_a_mechanism_the_listener_does_not_enable_is_named(material):
    async def scenario(broker, props):
        async def request(api_key, version, body):
            return await conn.request(api_key, version, body)
        # SSL listener: no SASL at all (ILLEGAL_SASL_STATE), on a plain TLS connection.
        tls = from_properties({**props, "inter.broker.listener.name": "SSL",
                               "ssl.endpoint.identification.algorithm": ""},
                              broker.listeners)
        assert tls.protocol == SecurityProtocol.SSL and tls.sasl() is None
        conn = await tls.connect("127.0.0.1", _port(broker, "SSL"))
        with pytest.raises(SaslExchangeError, match="ILLEGAL_SASL_STATE"):
            await authenticate(request, PlainClient("broker", "x"), 1)
        await conn.close()
        sha256 = InterBrokerListener("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, None,
                                     "SCRAM-SHA-256", {"username": "broker", "password": "x"})
        with pytest.raises(BrokerAuthenticationError, match=r"UNSUPPORTED_SASL_MECHANISM; "
                           r"the broker enables SCRAM-SHA-512, PLAIN, OAUTHBEARER"):
            await sha256.connect("127.0.0.1", _port(broker, "SASL_PLAINTEXT"))
    _serve(material, scenario)


def test_a_server_that_cannot_prove_the_credential_is_refused():
    """SCRAM's client checks the server's final signature (a server without the
    credential cannot forge it)."""
    answers = iter([{"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]}])
    client = ScramClient(scram.MECHANISMS["SCRAM-SHA-256"], "user", "pencil",
                         nonce="rOprNGfwEbeRWgbNEkqO")

    async def request(api_key, version, body):
        if api_key == ApiKey.SASL_HANDSHAKE:
            return next(answers)
        if body["auth_bytes"].startswith(b"n,,"):
            return {"error_code": 0, "auth_bytes": (
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"), "session_lifetime_ms": 0}
        return {"error_code": 0, "auth_bytes": b"v=" + b"A" * 44, "session_lifetime_ms": 0}
    with pytest.raises(SaslExchangeError, match="signature is wrong"):
        asyncio.run(authenticate(request, client, 1))


def test_reauthentication_comes_between_85_and_95_percent_of_the_lifetime():
    class Fixed:
        def __init__(self, value):
            self.value = value

        def random(self):
            return self.value
    assert reauthentication_delay(0) is None
    assert reauthentication_delay(10000, Fixed(0.0)) == pytest.approx(8.5)
    assert reauthentication_delay(10000, Fixed(1.0)) == pytest.approx(9.5)


def test_a_session_with_a_lifetime_is_reauthenticated_while_requests_flow(material):
    """connections.max.reauth.ms 1500: the connection re-authenticates by itself every
    1.3-1.4 s, holding requests meanwhile; requests made across three lifetimes are all
    answered on the one connection, and the broker closes no expired session."""
    async def scenario(broker, props):
        inter = from_properties(props, broker.listeners)
        conn = await inter.connect("127.0.0.1", _port(broker, "SASL_SSL"), broker_id=1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4.5
        answered = 0
        held = []
        while loop.time() < deadline:
            answered += bool((await _metadata(conn))["brokers"])
            held.append(conn.send(ApiKey.METADATA, 1, {"topics": []}))
            await asyncio.sleep(0.05)
        for future in held:
            assert (await future)["brokers"]
        assert not conn.closed
        await conn.close()
        return answered, conn.authentications, broker.metrics.expired_sessions_closed
    answered, authentications, expired = _serve(material, scenario, reauth_ms=1500)
    assert answered > 20 and authentications >= 3 and expired == 0


def test_the_inter_broker_listener_needs_its_credentials(material):
    props = _properties(material)
    listeners = build_listeners(props)
    no_password = {k: v for k, v in props.items()}
    no_password["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = \
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker";'
    with pytest.raises(SecurityConfigError, match="username and password"):
        from_properties(no_password, build_listeners(no_password))
    with pytest.raises(SecurityConfigError, match="not enabled"):
        from_properties({**props, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
                        listeners)
    with pytest.raises(SecurityConfigError, match="inter.broker.listener.name"):
        from_properties({**props, "inter.broker.listener.name": "NONE"}, listeners)
    assert ssl.SSLContext is type(from_properties(props, listeners).ssl_context)
