"""Handed-out secrets (API tokens, enrollment tokens, node credentials): ``<prefix>_<key id>_<secret>``.

256 random bits, shown once, stored as a SHA-256 digest and found by the key id kept in clear.
Because the secret is random, a fast digest is as safe as a slow password hash and keeps every
request cheap.
"""

import hashlib
import secrets
from typing import Final


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# Compared against when a presented key id matches nothing, so a miss costs what a hit costs.
_NO_MATCH_DIGEST: Final = hash_secret("no such key")


def new_secret(prefix: str, *, key_bytes: int = 6) -> tuple[str, str, str]:
    """A key id, a secret and the string handed out once: ``<prefix>_<key id>_<secret>``."""
    key_id = secrets.token_hex(key_bytes)
    secret = secrets.token_urlsafe(32)
    return key_id, secret, f"{prefix}_{key_id}_{secret}"


def split_presented(presented: str, prefix: str) -> tuple[str, str] | None:
    """The key id and secret of a presented ``<prefix>_<key id>_<secret>``, or None if it is not one."""
    found_prefix, _, rest = presented.partition("_")
    key_id, _, secret = rest.partition("_")
    if found_prefix != prefix or not key_id or not secret:
        return None
    return key_id, secret


def secret_matches(stored_digest: str | None, secret: str) -> bool:
    """Constant-time comparison, also when there was no row to compare against."""
    matches = secrets.compare_digest(stored_digest or _NO_MATCH_DIGEST, hash_secret(secret))
    return matches and stored_digest is not None
