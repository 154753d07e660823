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
import time
from collections import OrderedDict
from typing import Any

import bcrypt

from bottleneck_exporter.config import ConfigError, load_yaml, shown_key

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


# Remembered password checks. Verified credentials: Prometheus scrapes every few seconds with the same ones.
# Refused credentials: at most one bcrypt per distinct credential per interval, however often it is retried.
_VERIFIED_KEPT = 64
_REFUSED_KEPT = 4096
_REFUSED_SECONDS = 60.0
# Each step of bcrypt's cost doubles a check, and cost 10 takes a server CPU tens of milliseconds: above 14, a
# first scrape, and every distinct wrong password, would hold the one password-checking thread for seconds.
MAX_BCRYPT_COST = 14


@dataclasses.dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = dataclasses.field(default_factory=dict)
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    client_allowed_sans: frozenset[str] = frozenset()
    # Checked against for unknown users: as slow as the slowest configured hash, so that a user name
    # cannot be probed by timing.
    dummy_hash: bytes = b""
    _verified: OrderedDict[bytes, None] = dataclasses.field(default_factory=OrderedDict)
    _refused: OrderedDict[bytes, float] = dataclasses.field(default_factory=OrderedDict)  # → until (monotonic)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def cached_verdict(self, authorization_header: str | None) -> bool | None:
        """The answer when it needs no bcrypt (no auth configured, a malformed header, credentials verified
        or refused lately), else None: then ``verify`` runs bcrypt."""
        if not self.basic_auth_users:
            return True
        credential = _credential(authorization_header)
        if credential is None:
            return False
        token = self._token(*credential)
        with self._lock:
            if token in self._verified:
                return True
            until = self._refused.get(token)
            if until is not None and until > time.monotonic():
                return False
        return None

    def verify(self, authorization_header: str | None) -> bool:
        """Check an ``Authorization: Basic ...`` header (True when basic auth is not configured): from the
        remembered answers, else with bcrypt (slow by design), and remember the answer."""
        verdict = self.cached_verdict(authorization_header)  # the same credential may have been checked meanwhile
        if verdict is not None:
            return verdict
        user, password = _credential(authorization_header) or ("", "")
        hashed = self.basic_auth_users.get(user)
        try:
            matches = bcrypt.checkpw(password.encode(), hashed or self.dummy_hash) and hashed is not None
        except ValueError:  # bcrypt refuses passwords over 72 bytes: no configured password is one of them
            matches = False
        token = self._token(user, password)
        with self._lock:
            if matches:
                _remember(self._verified, token, None, _VERIFIED_KEPT)
            else:
                _remember(self._refused, token, time.monotonic() + _REFUSED_SECONDS, _REFUSED_KEPT)
        return matches

    def _token(self, user: str, password: str) -> bytes:
        """A keyed digest of the credential: the caches never hold a password."""
        hashed = self.basic_auth_users.get(user, b"")
        return hmac.new(_CACHE_KEY, f"{user}\0{password}".encode() + hashed, hashlib.sha256).digest()

    def client_allowed(self, peer_certificate: dict[str, Any] | None) -> bool:
        """With ``client_allowed_sans``: whether the verified client certificate carries one of them (DNS
        name, IP address, e-mail or URI, as exporter-toolkit compares them)."""
        if not self.client_allowed_sans:
            return True
        sans = (peer_certificate or {}).get("subjectAltName", ())
        return any(value in self.client_allowed_sans for _kind, value in sans)


_CACHE_KEY = os.urandom(32)


def _credential(authorization_header: str | None) -> tuple[str, str] | None:
    if not authorization_header or not authorization_header.startswith("Basic "):
        return None
    try:
        user, _, password = base64.b64decode(authorization_header[6:], validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return user, password


def _remember(cache: OrderedDict[bytes, Any], token: bytes, value: Any, kept: int) -> None:
    cache[token] = value
    cache.move_to_end(token)
    while len(cache) > kept:
        cache.popitem(last=False)


def _require_mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping")
    return value


def load_web_config(path: str) -> WebConfig:
    data = load_yaml(path, "web config file")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{path}: {shown_key(key)}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    base = os.path.dirname(os.path.abspath(path))
    config = WebConfig()

    users = _require_mapping(data.get("basic_auth_users"), f"{path}: basic_auth_users")
    for user, hashed in users.items():
        where = f"{path}: basic_auth_users.{shown_key(user)}"
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"{where}: must be a bcrypt hash ($2y$...), not a plain password")
        if not hashed[4:6].isdigit() or not 4 <= int(hashed[4:6]) <= MAX_BCRYPT_COST:
            raise ConfigError(f"{where}: bcrypt cost must be 4 to {MAX_BCRYPT_COST} (htpasswd -nBC 10): each "
                              "step doubles the time every new or wrong password takes to check")
        # bcrypt's C library knows $2a$/$2b$; htpasswd writes $2y$, the same algorithm.
        config.basic_auth_users[str(user)] = ("$2b$" + hashed[4:]).encode()
    if config.basic_auth_users:
        cost = max(int(h[4:6]) for h in config.basic_auth_users.values())
        config.dummy_hash = bcrypt.hashpw(b"dummy", bcrypt.gensalt(rounds=cost))

    http = _require_mapping(data.get("http_server_config"), f"{path}: http_server_config")
    for key, value in http.items():
        if key == "headers":
            config.headers = {str(k): str(v) for k, v in _require_mapping(value, f"{path}: headers").items()}
            for header in config.headers:
                if header not in _SETTABLE_HEADERS:
                    raise ConfigError(f"{path}: http_server_config.headers.{shown_key(header)}: not one of "
                                      f"{', '.join(sorted(_SETTABLE_HEADERS))}")
        elif key != "http2":
            raise ConfigError(f"{path}: http_server_config.{shown_key(key)}: unknown key (known: headers, http2)")

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
            raise ConfigError(f"{where}.{shown_key(key)}: unknown key (known: {', '.join(sorted(_TLS_KEYS))})")
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
                raise ConfigError(f"{where}.{key}: not one of {', '.join(_TLS_VERSIONS)}")
            setattr(ctx, attr, _TLS_VERSIONS[tls[key]])
    if "min_version" not in tls:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    auth_type = tls.get("client_auth_type", "NoClientCert")
    if auth_type not in _CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: not one of {', '.join(_CLIENT_AUTH)}")
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
