"""Service API keys: who may call `biomem serve`, and in which role.

    secret, key = create_key(store, "kiosk", "agent")   # the secret is shown once, never stored
    key = authenticate(store, secret)                   # ApiKey(id, name, role) or None
    revoke_key(store, key.id)

Roles: `agent` may make gated calls only (every memory operation needs a probe or a session
opened with one); `admin` may also act by identity id (trusted import, forget by id), store τ
and send precomputed embeddings. The store keeps the SHA-256 of each key (a 256-bit random
secret needs no slow hash) and its first characters for listings.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError
from ..stores import KeyStore
from ..vocabulary import KEY_ROLES

PREFIX = "bm_"


@dataclass(frozen=True)
class ApiKey:
    """A caller of the service, as its key identifies it."""

    id: int
    name: str
    role: str

    @property
    def tag(self) -> str:
        """What sessions and attempt limits are bound to."""
        return f"key:{self.id}"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(store: KeyStore, name: str, role: str = "agent") -> tuple[str, ApiKey]:
    """A new key: (the secret, to hand over once; its ApiKey)."""
    if role not in KEY_ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(KEY_ROLES)}, got {role!r}")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError("a key needs a name (who or what uses it)")
    secret = PREFIX + secrets.token_urlsafe(32)
    key_id = store.add_api_key(name.strip(), role, digest(secret), secret[:len(PREFIX) + 6])
    return secret, ApiKey(key_id, name.strip(), role)


def authenticate(store: KeyStore, secret: Any) -> ApiKey | None:
    """The unrevoked key `secret` is, else None (looked up by digest, so timing says nothing about it)."""
    if not isinstance(secret, str) or not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    row = store.api_key(digest(secret))
    return ApiKey(*row) if row else None


def revoke_key(store: KeyStore, key_id: int) -> bool:
    """Revoke key `key_id` at once; False when no such unrevoked key exists."""
    return store.revoke_api_key(key_id)


def list_keys(store: KeyStore) -> list[dict[str, Any]]:
    """Every key ever made: id, name, role, prefix, created, revoked (never the secret)."""
    return store.api_keys()


def any_keys(store: KeyStore) -> bool:
    """Whether an unrevoked key exists (without one, the service binds only to 127.0.0.1)."""
    return store.api_keys_in_use()
