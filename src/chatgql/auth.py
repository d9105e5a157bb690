"""Bearer tokens: HS256 JWTs whose `sub` is the user id."""

from __future__ import annotations

import time

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


def user_from_authorization(settings: Settings, authorization: object) -> int:
    """The user id of an `Authorization: Bearer <token>` value, or Unauthenticated."""
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
        return check_id(claims.get("sub"), "sub")
    except BadUserInput:
        raise Unauthenticated("the token's sub is not a user id") from None
