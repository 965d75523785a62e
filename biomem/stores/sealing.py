"""Templates sealed at rest (ISO/IEC 24745: confidentiality and renewability).

Every biometric template is stored as AES-256-GCM ciphertext under a key kept outside the
database: `BIOMEM_KEY` (32 bytes, URL-safe base64), or a key file created on first use at
`BIOMEM_KEY_FILE` / `$XDG_CONFIG_HOME/biomem/key` (mode 0600), both read by biomem.settings.
A copied database without its key yields no template; `rekey` re-seals under a new key
(renewability).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import KeyUnavailableError
from ..settings import Settings

KEY_BYTES = 32
NONCE_BYTES = 12
_CHECK = b"biomem key check v1"


def new_key() -> bytes:
    """A fresh random 256-bit key."""
    return secrets.token_bytes(KEY_BYTES)


def encode_key(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode("ascii")


def decode_key(text: str, where: str) -> bytes:
    """A key from its URL-safe base64 text; a clear error for anything else."""
    try:
        key = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise KeyUnavailableError(f"{where} is not a URL-safe base64 key") from None
    if len(key) != KEY_BYTES:
        raise KeyUnavailableError(f"{where} holds {len(key)} bytes; a key is {KEY_BYTES} bytes")
    return key


def write_key(path: Path, key: bytes) -> None:
    """Write `key` to `path` with mode 0600 (directory 0700), replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(encode_key(key) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def load_key(*, create: bool, settings: Settings | None = None) -> bytes:
    """The configured key (default settings: the environment's): BIOMEM_KEY, else the key file,
    created when `create` and absent."""
    settings = settings or Settings.from_env()
    if settings.key:
        return decode_key(settings.key.get_secret_value(), "BIOMEM_KEY")
    path = settings.key_file
    if path.exists():
        return decode_key(path.read_text(), str(path))
    if not create:
        raise KeyUnavailableError(
            f"this store's templates are sealed and no key was found (BIOMEM_KEY unset, no {path}); "
            "restore the key file or set BIOMEM_KEY — nothing was read or written")
    key = new_key()
    write_key(path, key)
    return key


class Sealer:
    """AES-256-GCM over float32 vectors; `context` (the row's owner and modality) is
    authenticated, so a sealed template cannot be moved to another identity."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise KeyUnavailableError(f"a key is {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self._digest_key = hashlib.blake2b(key, person=b"biomem-digest", digest_size=32).digest()

    def seal(self, vector: np.ndarray, context: bytes) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        data = np.asarray(vector, dtype=np.float32).tobytes()
        return nonce + self._aead.encrypt(nonce, data, context)

    def open(self, blob: bytes, context: bytes) -> np.ndarray:
        try:
            data = self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], context)
        except InvalidTag:
            raise KeyUnavailableError("a template does not open under this key (wrong key, or the "
                                      "row was tampered with)") from None
        return np.frombuffer(data, dtype=np.float32)

    def digest(self, data: bytes) -> str:
        """A keyed digest of `data` (BLAKE2b under a subkey of this key): equal inputs match within the
        store, and without the key nobody recovers an address or session id from it."""
        return hashlib.blake2b(data, key=self._digest_key, digest_size=16).hexdigest()

    def check_value(self, context: bytes) -> bytes:
        """A sealed constant stored beside the data, to tell a wrong key at open time."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, _CHECK, context)

    def verify(self, check: bytes, context: bytes) -> None:
        try:
            ok = self._aead.decrypt(check[:NONCE_BYTES], check[NONCE_BYTES:], context) == _CHECK
        except InvalidTag:
            ok = False
        if not ok:
            raise KeyUnavailableError("the key does not open this store's templates (they were sealed "
                                      "with another key); set BIOMEM_KEY or restore the key file — "
                                      "nothing was read or written")
