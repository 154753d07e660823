"""``--web.config.file`` in the Prometheus exporter-toolkit format: TLS, mutual TLS and bcrypt basic auth.

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # mTLS
      client_ca_file: ca.crt
      client_allowed_sans: [prometheus.example]   # optional: also require one of these SANs
      min_version: TLS12
    basic_auth_users:
      prometheus: $2y$10$...   # htpasswd -nBC 10 "" | tr -d ':\\n'

Unknown keys are refused, as exporter-toolkit does, so a typo never silently turns security off; so are
``cipher_suites`` and ``curve_preferences``, which name Go's TLS constants that Python's ssl cannot apply.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import ssl
import threading
from typing import Any

import bcrypt

from exporter.config import ConfigError, load_yaml

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_KEYS = {
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
    "prefer_server_cipher_suites", "client_allowed_sans",
}
# Valid in exporter-toolkit but not applicable here: refused by name rather than ignored, so that a config
# that restricts ciphers never silently runs with OpenSSL's defaults.
_UNSUPPORTED_TLS_KEYS = {"cipher_suites", "curve_preferences"}
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
# exporter-toolkit's list: security headers only. Anything else (Content-Length, Content-Type) would
# contradict what the server itself sends.
_SETTABLE_HEADERS = {
    "Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options", "X-XSS-Protection",
    "Content-Security-Policy",
}


@dataclasses.dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = dataclasses.field(default_factory=dict)
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    client_allowed_sans: frozenset[str] = frozenset()
    # Checked against for unknown users: as slow as the slowest configured hash, so that a user name
    # cannot be probed by timing.
    dummy_hash: bytes = b""
    _verified: set[bytes] = dataclasses.field(default_factory=set)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def authorized(self, authorization_header: str | None) -> bool:
        """Check an ``Authorization: Basic ...`` header; True when basic auth is not configured."""
        if not self.basic_auth_users:
            return True
        if not authorization_header or not authorization_header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(authorization_header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.basic_auth_users.get(user)
        if hashed is None:
            bcrypt.checkpw(b"x", self.dummy_hash)
            return False
        # bcrypt is deliberately slow (~50 ms at cost 10); Prometheus scrapes every few seconds with the
        # same credentials, so remember successful checks by a keyed digest, never the password itself.
        token = hmac.new(_CACHE_KEY, f"{user}\0{password}".encode() + hashed, hashlib.sha256).digest()
        with self._lock:
            if token in self._verified:
                return True
        if not bcrypt.checkpw(password.encode(), hashed):
            return False
        with self._lock:
            self._verified.add(token)
        return True


    def client_allowed(self, peer_certificate: dict[str, Any] | None) -> bool:
        """With ``client_allowed_sans``: whether the verified client certificate carries one of them (DNS
        name, IP address, e-mail or URI, as exporter-toolkit compares them)."""
        if not self.client_allowed_sans:
            return True
        sans = (peer_certificate or {}).get("subjectAltName", ())
        return any(value in self.client_allowed_sans for _kind, value in sans)


_CACHE_KEY = os.urandom(32)


def _require_mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping")
    return value


def load_web_config(path: str) -> WebConfig:
    data = load_yaml(path)
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{path}: {key}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    base = os.path.dirname(os.path.abspath(path))
    config = WebConfig()

    users = _require_mapping(data.get("basic_auth_users"), f"{path}: basic_auth_users")
    for user, hashed in users.items():
        where = f"{path}: basic_auth_users.{user}"
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"{where}: must be a bcrypt hash ($2y$...), not a plain password")
        # bcrypt's C library knows $2a$/$2b$; htpasswd writes $2y$, the same algorithm.
        config.basic_auth_users[str(user)] = ("$2b$" + hashed[4:]).encode()
    if config.basic_auth_users:
        cost = max(int(h[4:6]) if h[4:6].isdigit() else 10 for h in config.basic_auth_users.values())
        config.dummy_hash = bcrypt.hashpw(b"dummy", bcrypt.gensalt(rounds=min(max(cost, 4), 31)))

    http = _require_mapping(data.get("http_server_config"), f"{path}: http_server_config")
    for key, value in http.items():
        if key == "headers":
            config.headers = {str(k): str(v) for k, v in _require_mapping(value, f"{path}: headers").items()}
            for header in config.headers:
                if header not in _SETTABLE_HEADERS:
                    raise ConfigError(f"{path}: http_server_config.headers.{header}: not one of "
                                      f"{', '.join(sorted(_SETTABLE_HEADERS))}")
        elif key != "http2":
            raise ConfigError(f"{path}: http_server_config.{key}: unknown key (known: headers, http2)")

    tls = _require_mapping(data.get("tls_server_config"), f"{path}: tls_server_config")
    if tls:
        config.ssl_context = _ssl_context(tls, base, f"{path}: tls_server_config")
        config.client_allowed_sans = _allowed_sans(tls, f"{path}: tls_server_config.client_allowed_sans")
    return config


def _allowed_sans(tls: dict[str, Any], where: str) -> frozenset[str]:
    sans = tls.get("client_allowed_sans")
    if sans is None:
        return frozenset()
    if not isinstance(sans, list) or not all(isinstance(san, str) and san for san in sans):
        raise ConfigError(f"{where}: must be a list of names")
    if tls.get("client_auth_type") != "RequireAndVerifyClientCert":
        raise ConfigError(f"{where}: needs client_auth_type RequireAndVerifyClientCert (a certificate to check)")
    return frozenset(sans)


def _ssl_context(tls: dict[str, Any], base: str, where: str) -> ssl.SSLContext:
    for key in tls:
        if key in _UNSUPPORTED_TLS_KEYS:
            raise ConfigError(f"{where}.{key}: not supported by bottleneck-exporter (Python's ssl applies "
                              "OpenSSL's cipher and curve choices); remove it")
        if key not in _TLS_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(_TLS_KEYS))})")
    for key in ("cert_file", "key_file"):
        if not tls.get(key):
            raise ConfigError(f"{where}.{key}: missing (TLS needs both cert_file and key_file)")

    def resolve(name: str) -> str:
        return os.path.join(base, str(tls[name]))

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(resolve("cert_file"), resolve("key_file"))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"{where}.cert_file/key_file: cannot load certificate and key: {err}") from None
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if key in tls:
            if tls[key] not in _TLS_VERSIONS:
                raise ConfigError(f"{where}.{key}: {tls[key]!r} is not one of {', '.join(_TLS_VERSIONS)}")
            setattr(ctx, attr, _TLS_VERSIONS[tls[key]])
    if "min_version" not in tls:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    auth_type = tls.get("client_auth_type", "NoClientCert")
    if auth_type not in _CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: {auth_type!r} is not one of {', '.join(_CLIENT_AUTH)}")
    if "client_ca_file" in tls:
        try:
            ctx.load_verify_locations(resolve("client_ca_file"))
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(f"{where}.client_ca_file: cannot load: {err}") from None
    elif auth_type not in ("NoClientCert", "RequestClientCert"):
        # Python's ssl verifies every client certificate it asks for, so it cannot demand a certificate
        # without a CA to check it against; serving without would silently drop the requirement.
        raise ConfigError(f"{where}.client_ca_file: required when client_auth_type is {auth_type}")
    # With a CA, RequireAnyClientCert also verifies against it (the closest Python's ssl comes); without
    # one, RequestClientCert cannot ask and serves like NoClientCert.
    ctx.verify_mode = _CLIENT_AUTH[auth_type] if "client_ca_file" in tls else ssl.CERT_NONE
    return ctx
