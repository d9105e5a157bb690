"""Standard Webhooks signatures (https://www.standardwebhooks.com/): what the webhooks
(events/webhooks.py) and the before-send hook (services/beforesend.py) sign their requests with."""

from __future__ import annotations

import base64
import hashlib
import hmac


def sign(keys: tuple[bytes, ...], webhook_id: str, timestamp: int, body: bytes) -> str:
    """The webhook-signature header's value (Standard Webhooks, v1): one signature per key,
    space-separated."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in keys)
