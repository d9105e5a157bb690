"""Bearer tokens: HS256 JWTs whose `sub` is the user id."""

from __future__ import annotations

import time
from collections import OrderedDict

import jwt

from .errors import BadUserInput, Unauthenticated
from .services.checks import check_id
from .settings import Settings

ALGORITHM = "HS256"


def issue_token(settings: Settings, user_id: int, ttl_seconds: int = 30 * 24 * 3600) -> str:
    now = int(time.time())
    claims: dict[str, object] = {"sub": str(user_id), "iat": now, "exp": now + ttl_seconds}
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    return jwt.encode(claims, settings.jwt_secret.get_secret_value(), algorithm=ALGORITHM)


_verified: OrderedDict[tuple[str, str, str | None], tuple[int, float]] = OrderedDict()
_VERIFIED_MAX = 50_000  # about 25 MB when full; a miss costs a signature check (~60 us)


def user_from_authorization(settings: Settings, authorization: object) -> int:
    """The user id of an `Authorization: Bearer <token>` value, or Unauthenticated.

    A token verified once is remembered (by its exact text and the secret it
    was checked with) until it expires: clients send the same token with every
    request, and the signature check is a measurable part of a small request.
    """
    key = (authorization, settings.jwt_secret.get_secret_value(), settings.jwt_audience) if isinstance(
        authorization, str
    ) else None
    if key is not None and (hit := _verified.get(key)) is not None:
        user_id, expires = hit
        if time.time() < expires:
            return user_id
        del _verified[key]
    user_id, expires = _verify(settings, authorization)
    if key is not None:
        _verified[key] = (user_id, expires)
        if len(_verified) > _VERIFIED_MAX:
            _verified.popitem(last=False)
    return user_id


def _verify(settings: Settings, authorization: object) -> tuple[int, float]:
    if not isinstance(authorization, str) or not authorization:
        raise Unauthenticated("authentication required: send Authorization: Bearer <token>")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization value must be 'Bearer <token>'")
    try:
        claims = jwt.decode(
            token.strip(),
            settings.jwt_secret.get_secret_value(),
            algorithms=[ALGORITHM],
            audience=settings.jwt_audience,
            options={"require": ["sub"], "verify_aud": settings.jwt_audience is not None},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    try:
        user_id = check_id(claims.get("sub"), "sub")
    except BadUserInput:
        raise Unauthenticated("the token's sub is not a user id") from None
    # No exp: remember it for a minute at most (the secret may rotate).
    expires = claims.get("exp")
    expires = float(expires) if isinstance(expires, (int, float)) else time.time() + 60
    return user_id, min(expires, time.time() + 3600)
