"""Attempt keys: an API key that is valid for one attempt of one rollout only.

A runner hands each attempt's agent a key of its own instead of the gateway's token. The key
names the rollout and the attempt and carries an HMAC of both under the gateway's token, so the
gateway checks it without any state: a key is accepted only on that attempt's model paths and
for rewards of its own rollout, and only while the attempt runs (``docs/security.md``). Whoever
holds the gateway's token (the runner) can mint keys; an agent, which holds only its own key,
cannot forge one for another attempt.

The format is ``fk1.<rollout>.<attempt>.<mac>``, each part base64url without padding; ``fk1``
names the format's version. The MAC alone is the key's URL form (``url_key``): an in-process
agent's base URL carries it (``/rollout/R/attempt/A/key/MAC/v1``), so a client that sends an
API key of its own (a placeholder, ``$OPENAI_API_KEY``) still reaches its attempt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Final, NamedTuple

__all__ = [
    "ATTEMPT_KEY_PREFIX",
    "AttemptKey",
    "check_url_key",
    "mint_attempt_key",
    "read_attempt_key",
    "url_key",
]

ATTEMPT_KEY_PREFIX: Final = "fk1."
_CONTEXT = b"fulmen attempt key v1\x00"


class AttemptKey(NamedTuple):
    """What a valid attempt key is good for: one attempt of one rollout."""

    rollout_id: str
    attempt_id: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, rollout_id: str, attempt_id: str) -> bytes:
    message = _CONTEXT + rollout_id.encode() + b"\x00" + attempt_id.encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()


def mint_attempt_key(secret: str, rollout_id: str, attempt_id: str) -> str:
    """Return the key of attempt ``attempt_id`` of rollout ``rollout_id`` under ``secret``.

    ``secret`` is the gateway's token: only a holder of it can mint a key the gateway accepts.
    """
    mac = _mac(secret, rollout_id, attempt_id)
    parts = (rollout_id.encode(), attempt_id.encode(), mac)
    return ATTEMPT_KEY_PREFIX + ".".join(_b64(part) for part in parts)


def read_attempt_key(secret: str, key: str) -> AttemptKey | None:
    """Return the attempt ``key`` is valid for under ``secret``; ``None`` if it is not a key.

    A key of another format, one that does not decode, or one whose MAC does not match (forged,
    altered, or minted under another secret) gives ``None``; the comparison takes constant time.
    """
    if not key.startswith(ATTEMPT_KEY_PREFIX):
        return None
    parts = key[len(ATTEMPT_KEY_PREFIX) :].split(".")
    if len(parts) != 3:
        return None
    try:
        rollout, attempt, mac = (_unb64(part) for part in parts)
        rollout_id, attempt_id = rollout.decode(), attempt.decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not hmac.compare_digest(mac, _mac(secret, rollout_id, attempt_id)):
        return None
    return AttemptKey(rollout_id, attempt_id)


def url_key(key: str) -> str | None:
    """Return the URL form of attempt key ``key`` (its MAC); ``None`` for another kind of key."""
    if not key.startswith(ATTEMPT_KEY_PREFIX):
        return None
    parts = key[len(ATTEMPT_KEY_PREFIX) :].split(".")
    return parts[2] if len(parts) == 3 else None


def check_url_key(secret: str, rollout_id: str, attempt_id: str, mac: str) -> bool:
    """Whether ``mac`` is the URL form of the key of that attempt under ``secret``."""
    try:
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, _mac(secret, rollout_id, attempt_id))
