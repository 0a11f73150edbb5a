"""Every setting ``kqlite serve`` takes, as one table: its flag, Kafka's name for it, its
default (and Kafka's, where kqlite's differs), how the value is read, and what it does.

The table is the one place a broker setting is described: ``kqlite serve``'s parser is
built from it (serve.py: :func:`add_arguments`, whose ``--help`` texts are the rows'
documentation) and docs/configuration.md's tables of broker and cluster settings are
generated from it (scripts/configuration_tables.py; a test holds the page to what the
script writes and the parser to the page). A new setting is one row here and its use
in serve.py.

A row's ``doc`` may hold Markdown code spans: the page shows them, ``--help`` shows the
text without the backticks. ``FIXED`` lists the limits kqlite fixes where Kafka has a
setting, with where their value lives; the page lists them after the settings.
"""

import argparse
from typing import Callable, NamedTuple, Optional

__all__ = ["Setting", "Fixed", "SETTINGS", "FIXED", "BROKER", "CLUSTER", "SECURITY",
           "add_arguments", "positive_int", "plain"]

BROKER = "broker"
CLUSTER = "cluster"
SECURITY = "security"      # properties only (server.properties, --override): no flag


class Setting(NamedTuple):
    flag: Optional[str]        # the option of kqlite serve (None: a property only)
    kafka: Optional[str]       # Kafka's broker property (None: Kafka has none)
    default: object            # the parsed default (None: see ``shown``)
    shown: str                 # the default in words (page and --help)
    kafka_default: Optional[str]  # Kafka's default, where it differs from kqlite's
    parse: Optional[Callable]  # text -> value, raising ArgumentTypeError (None: a switch)
    metavar: Optional[str]
    group: str                 # BROKER, or CLUSTER (used with --zookeeper)
    doc: str                   # what it does (Markdown code spans)
    required: bool = False
    # Where a property may also be given (server_properties.py): "listener" as
    # listener.name.<l>.<key>, "mechanism" only as listener.name.<l>.<mechanism>.<key>,
    # "listener or mechanism" either way; None: only as itself.
    scope: Optional[str] = None


class Fixed(NamedTuple):
    """A limit kqlite fixes where Kafka has none or a setting: the value is ``name`` in
    module ``module``."""
    module: str
    name: str
    kafka_default: str
    doc: str


def plain(text):
    """``text`` without its Markdown code spans' backticks (for --help)."""
    return text.replace("`", "")


# -- How values are read ---------------------------------------------------------------

def _boolean(text):
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return value == "true"


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _non_negative(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, not {text!r}")
    return value


def _idle_ms(text):
    if text.strip() == "-1":
        return -1
    return positive_int(text)


def _overrides(text):
    from ..server.connection_limits import parse_overrides
    try:
        return parse_overrides(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _authorizer_class(text):
    from ..server.authorization import CLASS_NAMES
    name = text.strip()
    if name and name not in CLASS_NAMES:
        raise argparse.ArgumentTypeError(
            f"unknown authorizer class {text!r}: kqlite has {' and '.join(CLASS_NAMES)}")
    return name


def _principals(text):
    from ..server.authorization import parse_super_users
    from ..server.authorization.bindings import AclBindingError
    try:
        return parse_super_users(text)
    except AclBindingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _setting(flag, kafka, default, parse, metavar, doc, *, shown=None, kafka_default=None,
             group=BROKER, required=False, scope=None):
    if shown is None:
        shown = str(default).lower() if isinstance(default, bool) else str(default)
    return Setting(flag, kafka, default, shown, kafka_default, parse, metavar, group, doc,
                   required, scope)


def _security(kafka, shown, doc, *, scope="listener", kafka_default=None):
    """A property-only security setting; its value is checked where it is used
    (kqlite/server/authentication/listener_security.py), at start."""
    return _setting(None, kafka, None, str, None, doc, shown=shown, group=SECURITY,
                    scope=scope, kafka_default=kafka_default)


SETTINGS = [
    _setting("--config", None, None, str, "FILE", shown="none",
             doc="read Kafka's broker properties from FILE (a `server.properties`): every "
                 "property on this page by its Kafka name; an unknown or invalid one stops the "
                 "start with an error naming it. A flag given too wins over the file"),
    _setting("--override", None, None, str, "KEY=VALUE", shown="none",
             doc="set one property (repeatable), over the file's value, as "
                 "`kafka-server-start.sh --override`"),
    _setting("--data-dir", "log.dirs", None, str, "DIR", shown="(required)",
             required=True,
             doc="the data dir to serve, Kafka's one log dir; `kqlite.open()` opens the same "
                 "directory"),
    _setting("--listen", "listeners", "127.0.0.1:9092", str, "HOST:PORT",
             kafka_default="PLAINTEXT://:9092",
             doc="the address the broker accepts Kafka clients on (plaintext); port 0 picks "
                 "a free one. The property takes Kafka's form, "
                 "`NAME://HOST:PORT[,NAME://HOST:PORT...]`: several listeners, each PLAINTEXT, "
                 "SSL, SASL_PLAINTEXT or SASL_SSL (through `listener.security.protocol.map` "
                 "for other names); an empty host binds every interface"),
    _setting("--advertised-host", "advertised.listeners", None, str, "HOST",
             shown="the listen host",
             doc="the host name the broker gives clients for itself (Metadata, "
                 "FindCoordinator, DescribeCluster), when they must reach it by another name "
                 "than the one it listens on. The property takes Kafka's form, one "
                 "`NAME://HOST:PORT` per listener: each client is answered with the endpoints "
                 "of the listener it connected to"),
    _setting("--metrics-listen", None, None, str, "HOST:PORT", shown="none (no metrics)",
             doc="serve Prometheus metrics at `http://HOST:PORT/metrics` (Kafka publishes "
                 "JMX MBeans instead; a cluster broker adds its replication and controller "
                 "metrics under the names Prometheus' JMX exporter gives Kafka's)"),
    _setting("--console", None, False, None, None, shown="off",
             doc="serve the web console (docs/console.md) at `http://HOST:PORT/` of "
                 "`--metrics-listen`, beside `/metrics`: read-only unless "
                 "`--console-allow-writes`; when a listener authenticates clients, the "
                 "console asks for a login checked by the broker's own SASL"),
    _setting("--console-allow-writes", None, False, None, None, shown="off (read-only)",
             doc="let the console create and delete topics, produce a test record and "
                 "reset an empty group's offsets, each sent to the broker as a Kafka request "
                 "of the logged-in user (authorized by the broker's ACLs)"),
    _setting("--console-sample-interval", None, 5.0, float, "SECONDS",
             doc="seconds between two samples of consumer lag and throughput for the "
                 "console's plots (an hour of them is kept in memory)"),
    _setting("--broker-id", "broker.id", 0, int, "N", kafka_default="-1, a generated id",
             doc="this broker's id, in Metadata; in a cluster it must be unique"),
    _setting("--num-partitions", "num.partitions", 1, int, "N",
             doc="partitions of auto-created topics"),
    _setting("--no-auto-create-topics", "auto.create.topics.enable", False, None, None,
             shown="topics are auto-created (true)",
             doc="a topic unknown to Metadata (or to a producer) is not created on first "
                 "use: this switch sets Kafka's property to false"),
    _setting("--max-request-bytes", "socket.request.max.bytes", 104857600, int, "BYTES",
             shown="104857600 (100 MiB)",
             doc="a larger length prefix closes the connection before anything of that size "
                 "is read"),
    _setting("--io-threads", "num.io.threads", None, positive_int, "N", shown="8",
             doc="storage threads: how many requests can be in storage at once (reads, "
                 "appends, fsyncs, topic changes); concurrent appends to an "
                 "`fsync=\"always\"` partition share fsyncs (group commit)"),
    _setting("--connections-max-idle-ms", "connections.max.idle.ms", 600000, _idle_ms, "MS",
             shown="600000 (10 minutes)",
             doc="a connection that sends nothing for this long while no request of it is "
                 "in progress is closed, as Kafka's selector expires idle connections; `-1` "
                 "never closes them"),
    _setting("--max-connections", "max.connections", None, positive_int, "N",
             shown="a quarter of the soft descriptor limit (`ulimit -n`), at least 64",
             kafka_default="unlimited",
             doc="at this many open connections the broker stops accepting until one "
                 "closes: new connections wait in the listen backlog, as Kafka's acceptor "
                 "waits for a slot. The quarter leaves the rest of the descriptors to the "
                 "logs (up to five eighths, see `max_open_logs`) and to sendfile regions"),
    _setting("--max-connections-per-ip", "max.connections.per.ip", None, _non_negative, "N",
             shown="three quarters of `--max-connections`", kafka_default="unlimited",
             doc="a new connection from an address that already has N is closed at once, "
                 "as Kafka closes it; so one address (a client leaking connections) never "
                 "takes every slot. Refusals are logged at most once a minute and counted in "
                 "`kqlite_connections_refused_total`"),
    _setting("--max-connections-per-ip-overrides", "max.connections.per.ip.overrides", None,
             _overrides, "HOST:N[,HOST:N...]", shown="none",
             doc="per-address caps; host names are resolved at start to all their "
                 "addresses"),
    _setting("--queued-max-request-bytes", "queued.max.request.bytes", None, positive_int,
             "BYTES",
             shown="268435456 (256 MiB), or `--max-request-bytes` if larger",
             kafka_default="unlimited",
             doc="the bytes of requests read and not yet answered, over all connections. A "
                 "connection reserves a request's size once its length prefix is read; "
                 "while that would pass the cap, it stops reading its socket (first come, "
                 "first served) until answered requests give memory back. Never below "
                 "`--max-request-bytes`, so every acceptable request fits. "
                 "`kqlite_queued_request_bytes` and `kqlite_queued_request_bytes_max` show "
                 "it"),
    _setting("--transaction-max-timeout-ms", "transaction.max.timeout.ms", 900000,
             positive_int, "MS", shown="900000 (15 minutes)",
             doc="the longest `transaction.timeout.ms` a transactional producer may ask for: "
                 "`InitProducerId` answers a longer one `INVALID_TRANSACTION_TIMEOUT`"),
    _setting("--transactional-id-expiration-ms", "transactional.id.expiration.ms", 604800000,
             positive_int, "MS", shown="604800000 (7 days)",
             doc="a transactional id with no transaction open or being decided for this "
                 "long is expired: its tombstone is written to `__transaction_state` and a "
                 "producer still using it gets `INVALID_PRODUCER_ID_MAPPING`"),
    _setting("--transaction-abort-timed-out-transaction-cleanup-interval-ms",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000,
             positive_int, "MS", shown="10000 (10 seconds)",
             doc="how often the transaction coordinator aborts the transactions open past "
                 "their `transaction.timeout.ms` (with a bumped producer epoch, which fences "
                 "the producer that left it open)"),
    _setting("--transaction-remove-expired-transaction-cleanup-interval-ms",
             "transaction.remove.expired.transaction.cleanup.interval.ms", 3600000,
             positive_int, "MS", shown="3600000 (1 hour)",
             doc="how often expired transactional ids are looked for"),
    _setting("--transaction-partition-verification-enable",
             "transaction.partition.verification.enable", True, _boolean, "true|false",
             doc="before appending a producer's first transactional batch to a partition, "
                 "the broker asks the transaction coordinator whether the partition is in the "
                 "producer's transaction (KIP-890 part 1); a batch that is not is refused "
                 "(`INVALID_TXN_STATE`, or `TRANSACTION_ABORTABLE` for Produce v11+)"),
    _setting("--authorizer-class-name", "authorizer.class.name", "", _authorizer_class,
             "CLASS", shown="none (everything allowed)",
             doc="`kafka.security.authorizer.AclAuthorizer` (Kafka's name) or "
                 "`kqlite.AclAuthorizer` turns on Kafka's ACL authorizer: every request is "
                 "checked against the ACLs (kept in the data dir, or in ZooKeeper with "
                 "`--zookeeper`), managed with CreateAcls/DeleteAcls or `kqlite acls`; "
                 "without it every client may do everything and the ACL APIs answer "
                 "`SECURITY_DISABLED`"),
    _setting("--super-users", "super.users", frozenset(), _principals, "PRINCIPALS",
             shown="none",
             doc="principals, `;`-separated (`User:admin;User:broker`), allowed everything "
                 "whatever the ACLs say; a cluster's brokers' own principal belongs here"),
    _setting("--allow-everyone-if-no-acl-found", "allow.everyone.if.no.acl.found", False,
             _boolean, "true|false",
             doc="a resource no ACL applies to (none on its name, on `*` or on a prefix of "
                 "it) is open to every principal; once one ACL applies, only the ACLs "
                 "decide"),
    _setting("--quota-window-num", "quota.window.num", 11, positive_int, "N",
             doc="client quotas measure each rate over this many samples of "
                 "`--quota-window-size-seconds`; a new client may send (N - 1) windows' "
                 "worth at once, and fewer samples give steadier rates over short spans"),
    _setting("--quota-window-size-seconds", "quota.window.size.seconds", 1, positive_int,
             "S",
             doc="the length of one client-quota sample; the request quota throttles a "
                 "client at most this long"),
    _setting("--zookeeper", "zookeeper.connect", None, str, "HOST:PORT[/CHROOT]",
             shown="none (a single broker)", group=CLUSTER,
             doc="the ZooKeeper ensemble and chroot of the cluster to join; the chroot is "
                 "created if missing. `--broker-id` must be unique in the cluster"),
    _setting("--zookeeper-session-timeout-ms", "zookeeper.session.timeout.ms", 6000,
             positive_int, "MS", kafka_default="18000", group=CLUSTER,
             doc="a broker silent this long loses its registration (and the "
                 "controllership)"),
    _setting("--default-replication-factor", "default.replication.factor", 1, positive_int,
             "N", group=CLUSTER,
             doc="replicas of created topics; auto-created topics get at most the live "
                 "broker count"),
    _setting("--replica-lag-time-max-ms", "replica.lag.time.max.ms", 30000, positive_int,
             "MS", group=CLUSTER,
             doc="a follower that has not caught up for this long leaves the ISR"),
    _setting("--replica-high-watermark-checkpoint-interval-ms",
             "replica.high.watermark.checkpoint.interval.ms", 5000, positive_int, "MS",
             group=CLUSTER,
             doc="how often (from a storage thread) every hosted partition's high watermark "
                 "is written to `<data dir>/replication-offset-checkpoint`; also written at "
                 "shutdown. A restarted broker starts its roles from it, and `kqlite.open()` "
                 "on the data dir reads up to it"),
    _setting("--controlled-shutdown-retry-backoff-ms", "controlled.shutdown.retry.backoff.ms",
             5000, _non_negative, "MS", group=CLUSTER,
             doc="wait between ControlledShutdown attempts on SIGTERM (3 attempts, as "
                 "`controlled.shutdown.max.retries`)"),
    _setting("--offsets-topic-replication-factor", "offsets.topic.replication.factor", 3,
             positive_int, "N", group=CLUSTER,
             doc="replicas of `__consumer_offsets`, created through ZooKeeper on the first "
                 "FindCoordinator; while fewer brokers are alive its creation fails and "
                 "groups get `COORDINATOR_NOT_AVAILABLE` (clients retry)"),
    _setting("--offsets-topic-num-partitions", "offsets.topic.num.partitions", 50,
             positive_int, "N", group=CLUSTER,
             doc="partitions of `__consumer_offsets`; a group is coordinated by the leader "
                 "of partition `abs(hashCode(group)) % N` (Kafka's rule), which stores its "
                 "commits and membership with `acks=all`"),
    _setting("--transaction-state-log-replication-factor",
             "transaction.state.log.replication.factor", 3, positive_int, "N", group=CLUSTER,
             doc="replicas of `__transaction_state`, created through ZooKeeper on the first "
                 "FindCoordinator for a transactional id; while fewer brokers are alive its "
                 "creation fails and transactional producers get "
                 "`COORDINATOR_NOT_AVAILABLE` (they retry)"),
    _setting("--transaction-state-log-num-partitions", "transaction.state.log.num.partitions",
             50, positive_int, "N", group=CLUSTER,
             doc="partitions of `__transaction_state`; a transactional id is coordinated by "
                 "the leader of partition `abs(hashCode(id)) % N` (Kafka's rule), which logs "
                 "every change of its transactions there with `acks=all` and sends their "
                 "markers to the partitions' leaders"),
    _setting("--transaction-state-log-min-isr", "transaction.state.log.min.isr", 2,
             positive_int, "N", group=CLUSTER,
             doc="`min.insync.replicas` of `__transaction_state` at its creation: a "
                 "coordinator whose partition has fewer in-sync replicas cannot log a "
                 "change, and answers `COORDINATOR_NOT_AVAILABLE`"),
    _setting("--auto-leader-rebalance-enable", "auto.leader.rebalance.enable", True, _boolean,
             "true|false", group=CLUSTER,
             doc="the controller moves leadership back to preferred replicas (the first of "
                 "each assignment) by itself: first 5 s after it takes over, then every "
                 "check interval"),
    _setting("--leader-imbalance-check-interval-seconds",
             "leader.imbalance.check.interval.seconds", 300, positive_int, "S", group=CLUSTER,
             doc="how often the controller checks the leader balance"),
    _setting("--leader-imbalance-per-broker-percentage",
             "leader.imbalance.per.broker.percentage", 10, _non_negative, "PCT", group=CLUSTER,
             doc="a broker whose share of preferred partitions led elsewhere is above this "
                 "gets them back (those whose preferred replica is live and in the ISR)"),
]

_MECHANISMS = "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`"

SETTINGS += [
    _security("listener.security.protocol.map",
              "`PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL`",
              "each listener name's security protocol, `NAME:PROTOCOL,...`", scope=None),
    _security("inter.broker.listener.name", "unset",
              "the listener other brokers of a cluster connect to (replica fetchers, the "
              "controller); it must be advertised", scope=None),
    _security("security.inter.broker.protocol", "`PLAINTEXT`",
              "without `inter.broker.listener.name`: the first advertised listener of this "
              "protocol is the inter-broker one (setting both is an error)", scope=None),
    _security("sasl.enabled.mechanisms", "`GSSAPI`",
              f"the SASL mechanisms of the SASL listeners, of {_MECHANISMS}; Kafka's default, "
              "GSSAPI (Kerberos), is not served, so a SASL listener needs this set"),
    _security("sasl.mechanism.inter.broker.protocol", "`GSSAPI`",
              "the mechanism a cluster broker authenticates with to other brokers' SASL "
              "inter-broker listener, with the `username` and `password` of that "
              "mechanism's JAAS entry", scope=None),
    _security("sasl.jaas.config", "none",
              "a mechanism's JAAS entry, only as "
              "`listener.name.<listener>.<mechanism>.sasl.jaas.config` (lower case): PLAIN's "
              "`PlainLoginModule` lists its users as `user_<name>=\"<password>\"`; "
              "`username` and `password` are the broker's own, for its connections to other "
              "brokers; OAUTHBEARER's `unsecuredValidator*` options configure Kafka's "
              "unsecured token validator", scope="mechanism"),
    _security("connections.max.reauth.ms", "0 (sessions do not expire)",
              "a SASL session's lifetime (KIP-368), told to the client in SaslAuthenticate; "
              "a request after it on a session not re-authenticated closes the connection; "
              "also per mechanism", scope="listener or mechanism"),
    _security("sasl.server.max.receive.size", "524288 (512 KiB)",
              "the largest frame read before authentication ends (and during a "
              "re-authentication): a larger length prefix closes the connection (Kafka's "
              "bound since CVE-2022-34917)", scope=None),
    _security("connection.failed.authentication.delay.ms", "100",
              "a failed authentication's answer and close wait this long, which slows "
              "password guessing", scope=None),
    _security("ssl.keystore.type", "the file's contents (PEM or PKCS12)",
              "`PEM` or `PKCS12` (read with the `cryptography` package); `JKS` is refused: "
              "convert it with `keytool -importkeystore`", kafka_default="JKS"),
    _security("ssl.keystore.location", "none",
              "the listener's certificate chain and private key: a PEM file holding both, or "
              "a PKCS#12 file; an SSL or SASL_SSL listener needs one"),
    _security("ssl.keystore.password", "none", "the PKCS#12 key store's password"),
    _security("ssl.key.password", "none", "the PEM private key's password, when encrypted"),
    _security("ssl.keystore.certificate.chain", "none",
              "the certificate chain as inline PEM (KIP-651), with `ssl.keystore.key`"),
    _security("ssl.keystore.key", "none", "the private key as inline PEM (KIP-651)"),
    _security("ssl.truststore.type", "the file's contents (PEM or PKCS12)",
              "the trust store's format, as `ssl.keystore.type`", kafka_default="JKS"),
    _security("ssl.truststore.location", "the system's certificates",
              "the certificates client certificates (and, for a cluster broker, other "
              "brokers' certificates) must chain to: PEM or PKCS#12"),
    _security("ssl.truststore.password", "none", "the PKCS#12 trust store's password"),
    _security("ssl.truststore.certificates", "none", "trusted certificates as inline PEM"),
    _security("ssl.client.auth", "`none`",
              "`none`, `requested` or `required`: whether clients present certificates; on "
              "SSL a certificate's subject is the principal; on SASL_SSL only the "
              "listener-prefixed value counts (KIP-684) and SASL names the principal"),
    _security("ssl.principal.mapping.rules", "`DEFAULT`",
              "how a client certificate's subject (RFC 2253) becomes a principal name: "
              "`DEFAULT`, or `RULE:<regex>/<replacement>/[L|U]` rules, the first whose regex "
              "matches the whole subject winning (KIP-371); none matching refuses the "
              "connection"),
    _security("ssl.enabled.protocols", "`TLSv1.2,TLSv1.3`", "the TLS versions allowed"),
    _security("ssl.protocol", "`TLSv1.3`", "accepted for compatibility: "
              "`ssl.enabled.protocols` decides"),
    _security("ssl.cipher.suites", "OpenSSL's defaults",
              "the TLS 1.2 cipher suites allowed, by OpenSSL's names (TLS 1.3's are "
              "OpenSSL's)", kafka_default="the JVM's defaults"),
    _security("zookeeper.set.acl", "`false`",
              "`false` only: a cluster broker does not authenticate to ZooKeeper (kqlite has "
              "no SASL or TLS client for it), so it cannot put ZooKeeper ACLs on the znodes it "
              "writes, and `true` stops the start. Protect ZooKeeper by the network instead "
              "(docs/security.md, \"ZooKeeper\")", scope=None),
    _security("ssl.endpoint.identification.algorithm", "`https`",
              "`https`: a cluster broker checks that another broker's certificate names the "
              "host it connects to; empty: it does not"),
]

FIXED = [
    Fixed("kqlite.server.broker", "AUTHENTICATION_TIMEOUT_MS", "none: connections.max.idle.ms "
          "between reads",
          "milliseconds a TLS handshake and a SASL exchange may take together before the "
          "connection is closed"),
    Fixed("kqlite.server.replica_manager", "AUTO_CREATE_LIMIT", "unlimited",
          "topics one Metadata request may auto-create, one after the other in a storage "
          "thread; the request's other new topics answer `UNKNOWN_TOPIC_OR_PARTITION`, as "
          "Kafka answers a topic still being created, so clients ask again and the next "
          "request creates the next ones"),
]


def _help(setting):
    text = plain(setting.doc)
    if setting.kafka:
        text = f"{setting.kafka}: {text}"
    if not setting.required:
        text += f" (default: {plain(setting.shown)})"
    return text.replace("%", "%%")


def add_arguments(parser, cluster_group):
    """Add every setting with a flag to ``parser``, the cluster ones to ``cluster_group``.
    Every default is None here: serve_config.py fills in what neither a flag, the
    properties nor ``--override`` gave, so it can tell a flag that was given."""
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        target = cluster_group if setting.group == CLUSTER else parser
        if setting.flag == "--override":
            target.add_argument(setting.flag, action="append", default=[],
                                metavar=setting.metavar, help=_help(setting))
        elif setting.parse is None:
            target.add_argument(setting.flag, action="store_true", default=None,
                                help=_help(setting))
        else:
            target.add_argument(setting.flag, type=setting.parse, default=None,
                                metavar=setting.metavar, help=_help(setting))
