"""A real ``kqlite serve --config server.properties`` child process with every kind of
listener, certificates made at test time, and SCRAM users added with ``kqlite users``.

Listeners (each on a free loopback port):

  PLAINTEXT       no authentication
  SSL             TLS; a client certificate is requested, and names the principal
  MTLS            TLS (mapped to SSL); a client certificate is required
  SASL_PLAINTEXT  PLAIN (alice / alice-secret), SCRAM-SHA-256/512 (alice, bob), OAUTHBEARER
  SASL_SSL        the same over TLS
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from certificates import Authority

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
_PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
          'username="alice" password="alice-secret" user_alice="alice-secret";')
_OAUTH = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
          'unsecuredLoginStringClaim_sub="alice";')


def properties(data_dir, certs, server, extra=None):
    props = {
        "log.dirs": str(data_dir),
        "num.partitions": "3",
        "listeners": ",".join(f"{n}://127.0.0.1:0" for n in
                              ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": server["pem"],
        "ssl.truststore.location": str(certs.ca_file),
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _PLAIN,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _PLAIN,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": _OAUTH,
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": _OAUTH,
    }
    props.update(extra or {})
    return props


def write_properties(path, props):
    with open(path, "w") as f:
        for key, value in props.items():
            f.write(f"{key}={value}\n")


def kqlite(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "kqlite.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


class SecuredBroker:
    """``ports`` by listener name; ``ca``, ``client`` (alice's certificate files)."""

    def __init__(self, root, extra=None):
        root = Path(root)
        self.certs = Authority(root / "certs")
        self.server = self.certs.issue("broker", {"CN": "localhost", "O": "kqlite"}, server=True)
        self.client = self.certs.issue("alice", {"CN": "Alice", "OU": "eng", "O": "Acme"})
        self.ca = str(self.certs.ca_file)
        self.data_dir = root / "data"
        self.data_dir.mkdir()
        for user, password in PASSWORDS.items():
            done = kqlite("users", str(self.data_dir), "add", user, "--password", password)
            assert done.returncode == 0, done.stderr
        self.config = root / "server.properties"
        write_properties(self.config, properties(self.data_dir, self.certs, self.server, extra))
        self.proc = subprocess.Popen([sys.executable, "-m", "kqlite.cli", "serve", "--config",
                                      str(self.config)], stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.ports = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.ports:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if line.startswith("kqlite broker listeners:"):
                self.ports = {m[0]: int(m[1]) for m in
                              re.findall(r"(\w+)://127\.0\.0\.1:(\d+)", line)}
        if not self.ports:
            self.proc.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines))
        os.set_blocking(self.proc.stderr.fileno(), False)

    def bootstrap(self, listener):
        return f"127.0.0.1:{self.ports[listener]}"

    def stderr(self):
        try:
            self.lines.append(self.proc.stderr.read() or "")
        except (TypeError, OSError):
            pass
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
