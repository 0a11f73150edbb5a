"""Authentication: who a client is, proven by TLS or SASL before it is served.

- ``listener_security``: each listener's security from Kafka's properties (TLS context,
  certificate principal mapping, SASL mechanisms and their JAAS entries);
- ``tls``: TLS contexts from ``ssl.*``; ``principal_mapping``: a client certificate's
  principal (``ssl.principal.mapping.rules``); ``jaas``: ``sasl.jaas.config`` values;
- ``sasl_server``: the SASL exchange before anything else is served, a pure state machine
  (Kafka's ``SaslServerAuthenticator``); ``mechanism``: what every mechanism's server is;
  ``plain``, ``scram_server`` (over ``scram``), ``oauthbearer``: the mechanisms;
- ``sasl_client``: the client side of the exchange, for a cluster broker's connections;
- ``credentials``, ``credential_file``, ``credential_changes``: the SCRAM credentials a
  login is checked against, the data dir's file of them, and the admin APIs' rules.

The connection (kqlite/server/broker.py) runs the TLS handshake and the SASL exchange and
then replaces its ``Session`` with the principal they established (request_context.py);
handlers and the authorizer only ever see that principal.
"""
