"""``kqlite serve``'s configuration: its flags, a Kafka ``server.properties`` (``--config``)
and ``--override key=value``, merged into one set of settings and the broker's listeners.

Theory of operation. Every setting is a row of serve_settings.py's table, under its flag
and its Kafka property name. A value comes from, in order of precedence: the flag, when it
was given; ``--override``; the properties file; the row's default. Property keys are
checked first (server_properties.py: an unknown key stops the start, naming it); a value
that does not parse stops it too, naming the key. The listeners are built from
``listeners`` and ``advertised.listeners`` (``--listen HOST:PORT`` is one PLAINTEXT
listener; ``--advertised-host HOST`` advertises every listener on that host) with the
security properties of each (kqlite/server/authentication/listener_security.py), so a TLS
key store that cannot be read or a SASL mechanism kqlite does not serve is an error before
anything listens.
"""

import argparse

from ..server.authentication.listener_security import (SUPPORTED_MECHANISMS,
                                                       SecurityConfigError, build_listeners)
from ..server.listeners import format_endpoint
from .serve_settings import SETTINGS, _boolean
from .server_properties import PropertiesError, check_keys, parse_override, read_properties

__all__ = ["resolve", "ServeConfigError", "DEFAULT_LISTEN"]

DEFAULT_LISTEN = "127.0.0.1:9092"
_LISTENER_FLAGS = ("--listen", "--advertised-host")
_NOT_SETTINGS = ("--config", "--override")


class ServeConfigError(ValueError):
    """A configuration ``kqlite serve`` cannot start with; the message names the key."""


def _dest(flag):
    return flag.lstrip("-").replace("-", "_")


def _split_address(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ServeConfigError(f"--listen: expected HOST:PORT, not {address!r}")
    return host or "127.0.0.1", int(port)


def _read_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            return read_properties(f.read())
    except OSError as exc:
        raise ServeConfigError(f"--config {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ServeConfigError(f"--config {path}: not UTF-8 text") from None


def _from_property(setting, text):
    if setting.flag == "--no-auto-create-topics":
        return not _boolean(text)
    if setting.flag == "--data-dir" and "," in text:
        raise argparse.ArgumentTypeError("kqlite serves one log dir")
    return setting.parse(text.strip())


def properties_of(args):
    """The Kafka properties ``args`` give: the file, then the overrides on top."""
    properties = _read_file(args.config) if args.config else {}
    for text in args.override:
        try:
            key, value = parse_override(text)
        except PropertiesError as exc:
            raise ServeConfigError(str(exc)) from None
        properties[key] = value
    return properties


def resolve(args):
    """Fill every setting of ``args`` (parsed flags, None where not given) and return
    ``(properties, listeners)``; ServeConfigError names what cannot be used."""
    properties = properties_of(args)
    try:
        check_keys(properties, SETTINGS, SUPPORTED_MECHANISMS)
    except PropertiesError as exc:
        raise ServeConfigError(str(exc)) from None
    for setting in SETTINGS:
        if setting.flag is None or setting.flag in _NOT_SETTINGS + _LISTENER_FLAGS:
            continue
        dest = _dest(setting.flag)
        if getattr(args, dest) is not None:
            continue
        text = properties.get(setting.kafka) if setting.kafka else None
        if text is None:
            value = setting.default
        else:
            try:
                value = _from_property(setting, text)
            except argparse.ArgumentTypeError as exc:
                raise ServeConfigError(f"{setting.kafka}: {exc}") from None
        setattr(args, dest, False if setting.parse is None and value is None else value)
    if args.data_dir is None:
        raise ServeConfigError("log.dirs (--data-dir): the data dir to serve is required")
    return properties, _listeners(args, properties)


def _listeners(args, properties):
    properties = dict(properties)
    if args.listen is not None or "listeners" not in properties:
        host, port = _split_address(args.listen or DEFAULT_LISTEN)
        properties["listeners"] = format_endpoint("PLAINTEXT", host, port)
    try:
        listeners = build_listeners(properties)
    except SecurityConfigError as exc:
        raise ServeConfigError(str(exc)) from None
    if args.advertised_host is not None:
        listeners = [listener._replace(advertised=listener.advertised._replace(
            host=args.advertised_host)) for listener in listeners]
    first = listeners[0].endpoint
    args.listen = f"{first.host}:{first.port}"
    return listeners
