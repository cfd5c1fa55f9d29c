"""OIDC tokens from configured issuers, checked as the Jumpstarter controller checks them.

The configuration is the controller's `authentication` section: `internal` (lessor's own tokens) and `jwt`, a
list of JWT authenticators in the format of Kubernetes' structured authentication configuration (`issuer.url`,
`issuer.audiences`, `claimMappings.username.claim` and `.prefix`). A token whose `iss` names a configured
issuer is checked against that issuer's keys, fetched from its discovery document's `jwks_uri` and cached;
a key id the cache does not know refetches them (a rotation), at most once per REFETCH_EVERY seconds, so
tokens with made-up key ids cannot make lessor hammer the issuer. Fetching is asynchronous (aiohttp) and
checking a signature is cryptography's, so the event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from .tokens import MAX_TOKEN, InvalidToken

REFETCH_EVERY = 10.0
"""Seconds between two fetches of an issuer's keys for key ids it did not have (a rotation is seen at once
the first time; made-up key ids cost one fetch per this period at most)."""
FETCH_TIMEOUT = 10.0
"""Seconds a discovery document or key set may take to arrive; after that the token is refused (the caller
retries), and nothing else waits on it."""
LEEWAY = 0.0
"""Seconds of clock skew allowed on exp and nbf, as Kubernetes' JWT authenticator (none)."""

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {"256": hashes.SHA256, "384": hashes.SHA384,
                                                  "512": hashes.SHA512}
_CURVES: dict[str, ec.EllipticCurve] = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}


class ConfigError(ValueError):
    """The authentication configuration cannot be used; the message names the field."""


@dataclass(frozen=True)
class JwtAuthenticator:
    """One entry of `authentication.jwt`."""

    issuer: str
    audiences: tuple[str, ...]
    username_claim: str
    username_prefix: str
    discovery_url: str | None = None
    certificate_authority: str | None = None
    """PEM of the CA that signs the issuer's TLS certificate; None: the system's."""


@dataclass(frozen=True)
class AuthConfig:
    """The Jumpstarter controller's `authentication` and `provisioning` settings, as lessor uses them."""

    internal_prefix: str = "internal:"
    jwt: tuple[JwtAuthenticator, ...] = ()
    provisioning: bool = False

    @classmethod
    def load(cls, path: Path) -> AuthConfig:
        """Read a YAML file shaped like the controller's config (its `authentication` key, `provisioning`
        beside it), or like the `authentication` section alone."""
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"cannot read the authentication configuration {path}: {err}") from None
        return cls.parse(doc or {}, str(path))

    @classmethod
    def parse(cls, doc: Any, where: str = "the configuration") -> AuthConfig:
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{where}: expected a mapping with an 'authentication' key")
        auth = doc.get("authentication", doc)
        if not isinstance(auth, Mapping):
            raise ConfigError(f"{where}: 'authentication' is not a mapping")
        internal = auth.get("internal") or {}
        prefix = internal.get("prefix", "internal:") if isinstance(internal, Mapping) else "internal:"
        jwts = auth.get("jwt") or []
        if not isinstance(jwts, list):
            raise ConfigError(f"{where}: authentication.jwt is not a list")
        provisioning = doc.get("provisioning") or {}
        return cls(str(prefix), tuple(_authenticator(j, f"{where}: authentication.jwt[{i}]")
                                      for i, j in enumerate(jwts)),
                   bool(isinstance(provisioning, Mapping) and provisioning.get("enabled")))


def _authenticator(doc: Any, where: str) -> JwtAuthenticator:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("issuer"), Mapping):
        raise ConfigError(f"{where}: needs an 'issuer' mapping")
    issuer = doc["issuer"]
    url = issuer.get("url")
    if not isinstance(url, str) or not url.startswith("https://") and not url.startswith("http://127.0.0.1"):
        raise ConfigError(f"{where}.issuer.url must be an https:// URL, not {url!r}")
    audiences = issuer.get("audiences") or []
    if not audiences or not all(isinstance(a, str) and a for a in audiences):
        raise ConfigError(f"{where}.issuer.audiences must list at least one audience")
    policy = issuer.get("audienceMatchPolicy")
    if len(audiences) > 1 and policy != "MatchAny":
        raise ConfigError(f"{where}.issuer.audienceMatchPolicy must be MatchAny when there are several audiences")
    mappings = doc.get("claimMappings") or {}
    username = mappings.get("username") if isinstance(mappings, Mapping) else None
    if not isinstance(username, Mapping):
        raise ConfigError(f"{where}.claimMappings.username is required")
    if username.get("expression"):
        raise ConfigError(f"{where}.claimMappings.username.expression: CEL expressions are not supported by lessor; "
                          "use claim and prefix")
    claim, prefix = username.get("claim"), username.get("prefix")
    if not isinstance(claim, str) or not claim:
        raise ConfigError(f"{where}.claimMappings.username.claim is required")
    if not isinstance(prefix, str):
        raise ConfigError(f"{where}.claimMappings.username.prefix is required with claim "
                          "(as in Kubernetes; \"\" for none)")
    return JwtAuthenticator(url, tuple(audiences), claim, prefix, issuer.get("discoveryURL"),
                            issuer.get("certificateAuthority"))


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int(text: str) -> int:
    return int.from_bytes(_unb64(text), "big")


def unverified_issuer(token: str) -> str | None:
    """The `iss` claim of a JWT before any check, to choose who checks it; None if it has none."""
    if len(token) > MAX_TOKEN:
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, RecursionError):
        return None
    iss = claims.get("iss") if isinstance(claims, Mapping) else None
    return iss if isinstance(iss, str) else None


PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


def _public_key(jwk: Mapping[str, Any]) -> PublicKey | None:
    """A JWK's public key, or None for a kind lessor does not check (it is then never matched)."""
    try:
        if jwk.get("kty") == "RSA":
            return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
        if jwk.get("kty") == "EC" and jwk.get("crv") in _CURVES:
            curve = _CURVES[jwk["crv"]]
            return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
    except (KeyError, ValueError, TypeError):
        return None
    return None


def _check_signature(key: PublicKey, alg: str, signed: bytes, signature: bytes) -> None:
    family, bits = alg[:2], alg[2:]
    digest = _HASHES.get(bits)
    if digest is None:
        raise InvalidToken(f"the token's algorithm {alg} is not one lessor checks (RS, PS, ES with 256/384/512)")
    try:
        if family in ("RS", "PS") and isinstance(key, rsa.RSAPublicKey):
            pad: padding.AsymmetricPadding = padding.PKCS1v15() if family == "RS" else \
                padding.PSS(mgf=padding.MGF1(digest()), salt_length=padding.PSS.DIGEST_LENGTH)
            key.verify(signature, signed, pad, digest())
        elif family == "ES" and isinstance(key, ec.EllipticCurvePublicKey):
            half = len(signature) // 2
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                       int.from_bytes(signature[half:], "big"))
            key.verify(der, signed, ec.ECDSA(digest()))
        else:
            raise InvalidToken(f"the token's algorithm {alg} does not fit the issuer's key")
    except InvalidSignature:
        raise InvalidToken("the token's signature does not match the issuer's key") from None


@dataclass
class _Keys:
    by_kid: dict[str, PublicKey] = field(default_factory=dict)
    fetched_at: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Issuers:
    """The configured JWT authenticators and their cached keys."""

    def __init__(self, config: AuthConfig, clock: Callable[[], float] = time.time,
                 refetch_every: float = REFETCH_EVERY) -> None:
        self.config = config
        self.refetch_every = refetch_every
        self._by_url = {a.issuer: a for a in config.jwt}
        self._keys = {a.issuer: _Keys() for a in config.jwt}
        self._clock = clock
        self.fetches = 0
        """Key set fetches so far (a rotation or a made-up key id costs one)."""

    def handles(self, issuer: str | None) -> bool:
        return issuer is not None and issuer in self._by_url

    async def username(self, token: str) -> str:
        """The prefixed username a valid token of a configured issuer maps to; InvalidToken with the reason."""
        iss = unverified_issuer(token)
        authenticator = self._by_url.get(iss or "")
        if authenticator is None:
            raise InvalidToken(f"the token's issuer {iss!r} is not one lessor is configured to trust")
        header_part, payload_part, signature_part = token.split(".")
        try:
            header = json.loads(_unb64(header_part))
            claims = json.loads(_unb64(payload_part))
            signature = _unb64(signature_part)
        except (ValueError, RecursionError):
            raise InvalidToken("the bearer token is not a JWT") from None
        if not isinstance(header, Mapping) or not isinstance(claims, Mapping):
            raise InvalidToken("the bearer token is not a JWT")
        alg, kid = str(header.get("alg", "")), header.get("kid")
        key = await self._key(authenticator, kid if isinstance(kid, str) else None)
        _check_signature(key, alg, f"{header_part}.{payload_part}".encode(), signature)
        return self._claims(authenticator, claims)

    def _claims(self, a: JwtAuthenticator, claims: Mapping[str, Any]) -> str:
        now = self._clock()
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not set(auds) & set(a.audiences):
            raise InvalidToken(f"the token's audience {aud!r} is none of {list(a.audiences)} configured for "
                               f"issuer {a.issuer}")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise InvalidToken("the token has no exp claim")
        if exp + LEEWAY <= now:
            raise InvalidToken(f"the token expired {int(now - exp)} s ago")
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and nbf - LEEWAY > now:
            raise InvalidToken("the token is not valid yet (nbf)")
        value = claims.get(a.username_claim)
        if not isinstance(value, str) or not value:
            raise InvalidToken(f"the token has no {a.username_claim!r} claim, which names the user")
        if a.username_claim == "email" and claims.get("email_verified") is False:
            raise InvalidToken("the token's email is not verified (email_verified is false)")
        return a.username_prefix + value

    async def _key(self, a: JwtAuthenticator, kid: str | None) -> PublicKey:
        keys = self._keys[a.issuer]
        found = _pick(keys.by_kid, kid)
        if found is not None:
            return found
        async with keys.lock:  # one fetch for every call that waits on the same unknown key
            found = _pick(keys.by_kid, kid)
            if found is not None:
                return found
            now = time.monotonic()
            if keys.fetched_at is None or now - keys.fetched_at >= self.refetch_every:
                keys.fetched_at = now
                self.fetches += 1
                keys.by_kid = await _fetch_keys(a)
                found = _pick(keys.by_kid, kid)
        if found is None:
            raise InvalidToken(f"the token's key id {kid!r} is not among issuer {a.issuer}'s keys")
        return found


def _pick(keys: Mapping[str, PublicKey], kid: str | None) -> PublicKey | None:
    if kid is not None:
        return keys.get(kid)
    return next(iter(keys.values())) if len(keys) == 1 else None


async def _fetch_keys(a: JwtAuthenticator) -> dict[str, PublicKey]:
    """The issuer's signing keys by key id, from the discovery document's jwks_uri."""
    context = ssl.create_default_context(cadata=a.certificate_authority) if a.certificate_authority else None
    discovery = a.discovery_url or a.issuer.rstrip("/") + "/.well-known/openid-configuration"
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(discovery, ssl=context if context is not None else True) as response:
                response.raise_for_status()
                document = await response.json(content_type=None)
            if not isinstance(document, Mapping) or not isinstance(document.get("jwks_uri"), str):
                raise InvalidToken(f"issuer {a.issuer}'s discovery document {discovery} has no jwks_uri")
            if a.discovery_url is None and document.get("issuer") != a.issuer:
                raise InvalidToken(f"issuer {a.issuer}'s discovery document names issuer {document.get('issuer')!r}")
            async with session.get(document["jwks_uri"], ssl=context if context is not None else True) as response:
                response.raise_for_status()
                jwks = await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as err:
        raise InvalidToken(f"cannot fetch issuer {a.issuer}'s keys: {type(err).__name__}: {err}") from None
    found: dict[str, PublicKey] = {}
    entries: Sequence[Any] = jwks.get("keys", []) if isinstance(jwks, Mapping) else []
    for i, jwk in enumerate(entries):
        if isinstance(jwk, Mapping) and jwk.get("use", "sig") == "sig":
            key = _public_key(jwk)
            if key is not None:
                found[str(jwk.get("kid", i))] = key
    return found
