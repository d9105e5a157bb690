"""Bearer tokens: HS256 JWTs whose `sub` is the user id (services/checks.check_user_id: 1..255
characters, no control characters; a token whose subject is not one is UNAUTHENTICATED).

Every token must carry `exp`, and may live at most CHATGQL_JWT_MAX_LIFETIME_SECONDS:
exp - iat, or exp - now for a token without iat. A token without exp would be
valid forever, and one with an exp far away nearly so: both are refused, in
every environment (`chatgql token` never issues either).

A token with an `aud` claim was minted for some audience: it is accepted only by a
server that expects that audience (CHATGQL_JWT_AUDIENCE), never by one that expects
none, so a token for another service that shares the secret does not work here.

Beside them, with CHATGQL_OIDC_ISSUER, an OpenID Connect provider's tokens (RS256, ES256,
EdDSA) signed by one of its published keys (jwks.py): their iss must be that issuer, their
aud contain CHATGQL_OIDC_AUDIENCE, exp (required), nbf and iat hold within
CHATGQL_OIDC_LEEWAY_SECONDS, and the user id is read at CHATGQL_OIDC_USER_ID_CLAIM (claims.py).
A token's header names its algorithm, and that decides how it is checked: HS256 with the
secret, the others with the provider's key of that algorithm only (a public key is never an
HMAC secret), "none" and anything else never.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import jwt
from jwt.exceptions import InvalidSubjectError

from ..claims import claim_at, parse_claim_path
from ..errors import BadUserInput, Unauthenticated
from ..services.checks import check_user_id
from ..settings import Settings
from .jwks import ASYMMETRIC, KeySet

ALGORITHM = "HS256"
# RFC 7519: sub is a StringOrURI. A JSON number there is refused, never read as its decimal text.
SUB_NOT_A_STRING = "the token's sub is not a string"


def issue_token(settings: Settings, user_id: str, ttl_seconds: int | None = None) -> str:
    """A token for user_id valid for ttl_seconds (default and maximum: jwt_max_lifetime_seconds)."""
    longest = settings.jwt_max_lifetime_seconds
    ttl_seconds = longest if ttl_seconds is None else ttl_seconds
    if not 0 < ttl_seconds <= longest:
        raise ValueError(
            f"a token's lifetime must be between 1 and {longest} seconds (CHATGQL_JWT_MAX_LIFETIME_SECONDS)"
        )
    now = int(time.time())
    claims: dict[str, object] = {"sub": check_user_id(user_id, "user_id"), "iat": now, "exp": now + ttl_seconds}
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    return jwt.encode(claims, settings.jwt_secret.get_secret_value(), algorithm=ALGORITHM)


_verified: OrderedDict[tuple, tuple[str, float, str | None]] = OrderedDict()
_VERIFIED_MAX = 50_000  # about 25 MB when full; a miss costs a signature check


def user_from_authorization(settings: Settings, authorization: object, keys: KeySet | None = None) -> str:
    """The user id of an `Authorization: Bearer <token>` value, or Unauthenticated.

    keys: the OpenID provider's (jwks.py), when CHATGQL_OIDC_ISSUER is set; its fetch, if the
    token needs one, was awaited before (KeySet.ensure): this only looks keys up.

    A token verified once is remembered (by its exact text and the secret it
    was checked with, and the rules it passed) until it expires: clients send the
    same token with every request, and the signature check is a measurable part
    of a small request. A provider's token is remembered while its key is published.
    """
    key = (
        (
            authorization,
            settings.jwt_secret.get_secret_value(),
            settings.jwt_audience,
            settings.jwt_max_lifetime_seconds,
            settings.oidc_issuer,
            settings.oidc_audience,
            settings.oidc_user_id_claim,
            id(keys),
        )
        if isinstance(authorization, str)
        else None
    )
    if key is not None and (hit := _verified.get(key)) is not None:
        user_id, expires, kid = hit
        if time.time() < expires and (kid is None or (keys is not None and kid in keys.keys)):
            return user_id
        del _verified[key]
    user_id, expires, kid = _verify(settings, authorization, keys)
    if key is not None:
        _verified[key] = (user_id, expires, kid)
        if len(_verified) > _VERIFIED_MAX:
            _verified.popitem(last=False)
    return user_id


def _verify(settings: Settings, authorization: object, keys: KeySet | None) -> tuple[str, float, str | None]:
    if not isinstance(authorization, str) or not authorization:
        raise Unauthenticated("authentication required: send Authorization: Bearer <token>")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("the Authorization value must be 'Bearer <token>'")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    algorithm = header.get("alg")
    if algorithm in ASYMMETRIC:
        return _verify_oidc(settings, token, header, keys)
    if algorithm != ALGORITHM:
        if isinstance(algorithm, str) and algorithm.lower() == "none":
            raise Unauthenticated("the token is not signed (alg none): refused")
        raise Unauthenticated(f"the token's algorithm {str(algorithm)[:20]!r} is not accepted here")
    user_id, expires = _verify_hs256(settings, token)
    return user_id, expires, None


def _verify_hs256(settings: Settings, token: str) -> tuple[str, float]:
    try:
        claims = jwt.decode(
            token,
            settings.jwt_secret.get_secret_value(),
            algorithms=[ALGORITHM],
            audience=settings.jwt_audience,
            options={"require": ["sub", "exp"], "verify_aud": True},
        )
    except jwt.MissingRequiredClaimError as error:
        raise Unauthenticated(f"the token has no {error.claim} claim") from None
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("the token is for another audience") from None
    except InvalidSubjectError:
        raise Unauthenticated(SUB_NOT_A_STRING) from None
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    if settings.jwt_audience is None and "aud" in claims:  # PyJWT lets an empty aud through
        raise Unauthenticated("the token is for another audience")
    try:
        user_id = check_user_id(_subject(claims.get("sub")), "sub")
    except BadUserInput as error:
        raise Unauthenticated(f"the token's sub is not a user id: {error.message}") from None
    return user_id, _remembered_until(settings, claims, 0.0)


def _verify_oidc(settings: Settings, token: str, header: dict, keys: KeySet | None) -> tuple[str, float, str | None]:
    algorithm = header["alg"]
    if keys is None or settings.oidc_issuer is None:
        raise Unauthenticated(f"this server accepts no {algorithm} tokens (no identity provider is configured)")
    try:
        unverified = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    if unverified.get("iss") != settings.oidc_issuer:  # said before the key: a foreign key is no news
        raise Unauthenticated("the token is from another issuer")
    kid = header.get("kid")
    found = keys.find(kid, algorithm)
    if found is None:
        raise keys.unknown_key(kid)
    leeway = settings.oidc_leeway_seconds
    try:
        claims = jwt.decode(
            token,
            found.key,
            algorithms=[found.algorithm],
            audience=settings.oidc_audience,
            issuer=settings.oidc_issuer,
            leeway=leeway,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.MissingRequiredClaimError as error:
        raise Unauthenticated(f"the token has no {error.claim} claim") from None
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise Unauthenticated("the token is not valid yet (nbf or iat in the future)") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("the token is for another audience") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("the token is from another issuer") from None
    except InvalidSubjectError:
        raise Unauthenticated(SUB_NOT_A_STRING) from None
    except jwt.PyJWTError:
        raise Unauthenticated("the token is not valid") from None
    path = parse_claim_path(settings.oidc_user_id_claim)
    value = claim_at(claims, path)
    where = settings.oidc_user_id_claim
    if value is None:
        raise Unauthenticated(f"the token has no user id at {where} (CHATGQL_OIDC_USER_ID_CLAIM)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise Unauthenticated(f"the token's user id at {where} is not a string or a number")
    try:
        user_id = check_user_id(_subject(value), where)
    except BadUserInput as error:
        raise Unauthenticated(f"the token's user id at {where} is not a user id: {error.message}") from None
    return user_id, _remembered_until(settings, claims, leeway), found.kid


def _subject(value: object) -> object:
    """A claim's user id as text: a number (some providers' numeric ids, a token of before
    string ids) is its decimal text, the id it always named."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _remembered_until(settings: Settings, claims: dict, leeway: float) -> float:
    """Until when a verified token is remembered; Unauthenticated if it lives too long."""
    now = time.time()
    expires = float(claims["exp"])  # PyJWT checked it is a number in the future
    issued = claims.get("iat")
    start = float(issued) if isinstance(issued, (int, float)) and not isinstance(issued, bool) else now
    if expires - start > settings.jwt_max_lifetime_seconds:
        raise Unauthenticated(
            f"the token lives longer than the {settings.jwt_max_lifetime_seconds} s this server accepts"
        )
    # Remembered for an hour at most (the secret may rotate).
    return min(expires + leeway, now + 3600)


def token_expiry(authorization: object) -> float | None:
    """When the bearer token of an Authorization value that user_from_authorization accepted
    expires (its exp, seconds since the epoch); None if it cannot be read. A websocket's session
    ends then (engine/handshake.py): a connection must not outlive its token."""
    if not isinstance(authorization, str):
        return None
    token = authorization.strip().partition(" ")[2].strip()
    try:
        claims = jwt.decode(token, options={"verify_signature": False})  # verified by the caller
    except jwt.PyJWTError:
        return None
    expires = claims.get("exp")
    return float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None
