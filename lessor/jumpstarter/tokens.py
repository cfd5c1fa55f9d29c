"""Bearer tokens as Jumpstarter's controller makes them: ES256 JWTs whose subject is `KIND:NS:NAME:UID`.

The signing key is one P-256 key in a Secret of the operator namespace (`SIGNING_SECRET`), created by the
first replica that needs it. The UID in the subject ties a token to one incarnation of its Client or
Exporter: a token of a deleted object does not work for a new one of the same name.
Written with `cryptography` alone (a dependency already), so minting needs no extra package.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from lessor.actors.api import AlreadyExists, Api
from lessor.actors.leasing.credentials import SECRET
from lessor.model.views import Meta
from lessor.model.views.leasing import ClientView, ExporterView

if TYPE_CHECKING:
    from lessor.gateway import Gateway

SIGNING_SECRET = "lessor-jumpstarter-signing-key"
SIGNING_KEY = "key.pem"
ISSUER = "lessor"
AUDIENCE = "jumpstarter"
KINDS = {"client": "Client", "exporter": "Exporter"}
"""The subject's kind word → the `jumpstarter-kind` metadata the tools send."""


class InvalidToken(Exception):
    """Not a token lessor signed, or not one for the object it claims (the caller answers UNAUTHENTICATED)."""


@dataclass(frozen=True, slots=True)
class Subject:
    kind: str  # "client" or "exporter"
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.namespace}:{self.name}:{self.uid}"

    @classmethod
    def parse(cls, text: str) -> Subject:
        parts = text.split(":")
        if len(parts) != 4 or parts[0] not in KINDS or not all(parts[1:]):
            raise InvalidToken(f"the token's subject {text!r} is not client|exporter:NAMESPACE:NAME:UID")
        return cls(*parts)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("the signing key must be an EC P-256 private key (ES256)")
    return key


def mint(key: ec.EllipticCurvePrivateKey, subject: Subject, *, now: float | None = None,
         lifetime: float | None = None) -> str:
    """A signed JWT for `subject`, valid `lifetime` seconds (`exp`), or without expiry (None; a new key revokes
    it). Upstream's are valid a year unless configured otherwise."""
    header = {"alg": "ES256", "typ": "JWT"}
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": str(subject), "iat": issued}
    if lifetime is not None:
        claims["exp"] = issued + int(lifetime)
    signing_input = f"{_b64(json.dumps(header, separators=(',', ':')).encode())}." \
                    f"{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


MAX_TOKEN = 4096
"""Characters in a bearer token at most: lessor's are about 400; a bigger one is refused unread (gRPC
itself refuses more than 8 KiB of metadata in all)."""


def verify(public: ec.EllipticCurvePublicKey, token: str) -> Subject:
    """The subject of a token signed by `public`; InvalidToken for anything else, with the reason.

    The signature is checked over the raw parts before anything is decoded: a caller without a valid token
    never gets its JSON parsed (a header of 1,500 nested brackets was a RecursionError and a traceback)."""
    if len(token) > MAX_TOKEN:
        raise InvalidToken(f"the bearer token is {len(token)} characters long, more than lessor's {MAX_TOKEN}")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("the bearer token is not a JWT (three parts separated by dots)")
    try:
        signature = _unb64(parts[2])
    except ValueError as err:
        raise InvalidToken("the bearer token's signature is not base64url") from err
    if len(signature) != 64:
        raise InvalidToken("the bearer token is not an ES256 JWT (its signature is not 64 bytes)")
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        public.verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature as err:
        raise InvalidToken("the bearer token's signature is not lessor's") from err
    try:  # signed by lessor's key: lessor's own JSON
        header = json.loads(_unb64(parts[0]))
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, RecursionError) as err:
        raise InvalidToken("the bearer token is not a JWT") from err
    if not isinstance(header, Mapping) or header.get("alg") != "ES256":
        raise InvalidToken("the bearer token is not an ES256 JWT")
    if not isinstance(claims, Mapping) or claims.get("iss") != ISSUER or claims.get("aud") != AUDIENCE:
        raise InvalidToken("the bearer token was not issued by lessor for jumpstarter")
    exp = claims.get("exp")
    if isinstance(exp, int | float) and exp < time.time():
        raise InvalidToken("the bearer token has expired")
    return Subject.parse(str(claims.get("sub", "")))


def token_expiry(token: str) -> datetime | None:
    """The `exp` of a token lessor minted (unverified: the caller just minted it), or None without one."""
    try:
        claims = json.loads(_unb64(token.split(".")[1]))
    except (IndexError, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, Mapping) else None
    return datetime.fromtimestamp(exp, UTC) if isinstance(exp, int | float) else None


REFRESH_EVERY = 2.0
"""Seconds between two reads of the signing key that a verification failure asks for (`refresh`)."""


class SigningKey:
    """The operator namespace's signing key (created by `create=True`, the leader's minting).

    Kept once read; `refresh` reads it again if it was read more than `max_age` seconds ago: minting always
    does, a failed verification does at most every `REFRESH_EVERY` seconds, so that `lessor credentials
    rotate-key` takes effect without a restart."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self._key: ec.EllipticCurvePrivateKey | None = None
        self._read_at = -REFRESH_EVERY

    async def get(self, *, create: bool = False, refresh: bool = False,
                  max_age: float = REFRESH_EVERY) -> ec.EllipticCurvePrivateKey | None:
        if self._key is not None and (not refresh or time.monotonic() - self._read_at < max_age):
            return self._key
        self._read_at = time.monotonic()
        secret = await self.api.get(SECRET, self.namespace, SIGNING_SECRET)
        if secret is None and create:
            body: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": SIGNING_SECRET, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/part-of": "lessor"}},
                "data": {SIGNING_KEY: base64.b64encode(new_key_pem()).decode()},
            }
            try:
                secret = await self.api.create(SECRET, self.namespace, body)
            except AlreadyExists:  # another replica made it first: use theirs
                secret = await self.api.get(SECRET, self.namespace, SIGNING_SECRET)
        if secret is None:
            return None
        pem = base64.b64decode(((secret.get("data") or {}).get(SIGNING_KEY)) or "")
        self._key = load_key(pem)
        return self._key


class Minter:
    """What the leasing actors mint credentials with (`actors.leasing.credentials.Credentials`)."""

    def __init__(self, key: SigningKey, endpoint: str, lifetime: float | None = None) -> None:
        self.key = key
        self.endpoint = endpoint
        self.lifetime = lifetime

    async def mint(self, kind: str, namespace: str, name: str, uid: str) -> str:
        key = await self.key.get(create=True, refresh=True, max_age=0.0)  # the current key, even just rotated
        assert key is not None
        return mint(key, Subject(kind, namespace, name, uid), lifetime=self.lifetime)

    def renew_at(self, token: str) -> float | None:
        """The start of the token's last tenth of life (at once for a token that is not lessor's JWT)."""
        try:
            claims = json.loads(_unb64(token.split(".")[1]))
        except (IndexError, ValueError):
            return 0.0
        if not isinstance(claims, Mapping):
            return 0.0
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float):
            return None
        issued = iat if isinstance(iat, int | float) else exp
        return float(exp - (exp - issued) / 10)


async def rotate(gateway: Gateway, api: Api, namespace: str, say: Callable[[str], None]) -> int:
    """`lessor credentials rotate-key`: a new signing key, and every credential lessor made is minted again.

    The key Secret gets a new key; every Client's and Exporter's credential Secret that lessor made is deleted
    and its `status.credential` cleared, so that their actors mint a new token with the new key (while lessor
    serves gRPC). Old tokens are refused from then on. The number of credentials to be minted again."""
    from lessor.actors.leasing.credentials import MANAGED_BY, secret_name
    from lessor.gateway import resources
    from lessor.model.kinds import CLIENT, EXPORTER

    secret = await api.get(SECRET, namespace, SIGNING_SECRET)
    data = {SIGNING_KEY: base64.b64encode(new_key_pem()).decode()}
    if secret is None:
        await api.create(SECRET, namespace, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
            "name": SIGNING_SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "lessor"}},
            "data": data})
    else:
        await api.merge_patch(SECRET, namespace, SIGNING_SECRET, {"data": data})
    say(f"replaced the signing key in Secret {namespace}/{SIGNING_SECRET}")
    count = 0
    for kind, resource, word in ((CLIENT, resources.CLIENT, "client"), (EXPORTER, resources.EXPORTER, "exporter")):
        view = ClientView if word == "client" else ExporterView
        for obj in (await gateway.list(resource))[0]:
            seen = view.of(obj)
            name, ns = seen.name, seen.namespace
            if not seen.credential:
                continue
            held = await api.get(SECRET, ns, secret_name(name, word))
            if held is not None and Meta.of(held).labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
                await api.delete(SECRET, ns, secret_name(name, word))
            await api.merge_patch(kind, ns, name, {"status": {"credential": None}}, subresource="status")
            count += 1
    say(f"{count} credentials will be minted again with the new key by the running operator")
    return count


__all__ = ["InvalidToken", "Minter", "SigningKey", "Subject", "mint", "rotate", "token_expiry", "verify"]
