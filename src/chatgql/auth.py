"""Bearer tokens: HS256 JWTs whose `sub` is the user id.

Every token must carry `exp`, and may live at most CHATGQL_JWT_MAX_LIFETIME_SECONDS:
exp - iat, or exp - now for a token without iat. A token without exp would be
valid forever, and one with an exp far away nearly so: both are refused, in
every environment (`chatgql token` never issues either).
"""

from __future__ import annotations

import time
from collections import OrderedDict

import jwt

from .errors import BadUserInput, Unauthenticated
from .services.checks import check_id
from .settings import Settings

ALGORITHM = "HS256"


def issue_token(settings: Settings, user_id: int, ttl_seconds: int | None = None) -> str:
    """A token for user_id valid for ttl_seconds (default and maximum: jwt_max_lifetime_seconds)."""
    longest = settings.jwt_max_lifetime_seconds
    ttl_seconds = longest if ttl_seconds is None else ttl_seconds
    if not 0 < ttl_seconds <= longest:
        raise ValueError(
            f"a token's lifetime must be between 1 and {longest} seconds (CHATGQL_JWT_MAX_LIFETIME_SECONDS)"
        )
    now = int(time.time())
    claims: dict[str, object] = {"sub": str(user_id), "iat": now, "exp": now + ttl_seconds}
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    return jwt.encode(claims, settings.jwt_secret.get_secret_value(), algorithm=ALGORITHM)


_verified: OrderedDict[tuple[str, str, str | None, int], tuple[int, float]] = OrderedDict()
_VERIFIED_MAX = 50_000  # about 25 MB when full; a miss costs a signature check (~60 us)


def user_from_authorization(settings: Settings, authorization: object) -> int:
    """The user id of an `Authorization: Bearer <token>` value, or Unauthenticated.

    A token verified once is remembered (by its exact text and the secret it
    was checked with, and the rules it passed) until it expires: clients send the
    same token with every request, and the signature check is a measurable part
    of a small request.
    """
    key = (
        (
            authorization,
            settings.jwt_secret.get_secret_value(),
            settings.jwt_audience,
            settings.jwt_max_lifetime_seconds,
        )
        if isinstance(authorization, str)
        else None
    )
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
            options={"require": ["sub", "exp"], "verify_aud": settings.jwt_audience is not None},
        )
    except jwt.MissingRequiredClaimError as error:
        raise Unauthenticated(f"the token has no {error.claim} claim") from None
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    try:
        user_id = check_id(claims.get("sub"), "sub")
    except BadUserInput:
        raise Unauthenticated("the token's sub is not a user id") from None
    now = time.time()
    expires = float(claims["exp"])  # PyJWT checked it is a number in the future
    issued = claims.get("iat")
    start = float(issued) if isinstance(issued, (int, float)) and not isinstance(issued, bool) else now
    if expires - start > settings.jwt_max_lifetime_seconds:
        raise Unauthenticated(
            f"the token lives longer than the {settings.jwt_max_lifetime_seconds} s this server accepts"
        )
    # Remembered for an hour at most (the secret may rotate).
    return user_id, min(expires, now + 3600)
