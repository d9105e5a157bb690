"""Who may put whom into a conversation: the hook a deployment fills in.

Beyond the users' own blocks (services/blocks.py), chatgql knows nothing about who trusts whom. Before anyone is put
into a conversation by someone else (createGroup, addMembers, and
createDirectConversation when it creates the conversation), the services ask
the MembershipPolicy. chatgql's own allows everything; a deployment replaces
it with CHATGQL_MEMBERSHIP_POLICY=package.module:attribute, an object called
once with the Settings that returns the policy (a class taking the settings
does). The policy refuses by raising a chatgql.errors.ChatError, normally
Forbidden; the call then writes nothing. Anything else it raises is an
internal error.

It is asked outside any transaction (no lock is held while it awaits a block
list or a consent service), after the caller's own right to the conversation
was checked, with the people who are not in the conversation yet.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class MembershipRequest:
    """actor_id wants user_ids (never actor_id itself) in a conversation of kind;
    conversation_id is None when the call creates it."""

    actor_id: str
    user_ids: Sequence[str]
    kind: Literal["DIRECT", "GROUP"]
    conversation_id: int | None = None


@runtime_checkable
class MembershipPolicy(Protocol):
    async def check_add_members(self, request: MembershipRequest) -> None:
        """Return to allow; raise a ChatError (Forbidden) to refuse the whole call."""


class AllowAll:
    """chatgql's default: anyone may add anyone (the rate limits and the daily group cap still apply)."""

    async def check_add_members(self, request: MembershipRequest) -> None:
        return None


ALLOW_ALL = AllowAll()


def load_policy(path: str | None, settings: Any) -> MembershipPolicy:
    """The policy CHATGQL_MEMBERSHIP_POLICY names ("package.module:attribute"), or ALLOW_ALL."""
    if not path:
        return ALLOW_ALL
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"CHATGQL_MEMBERSHIP_POLICY must look like package.module:attribute, got {path!r}")
    factory = getattr(importlib.import_module(module_name), attribute)
    policy = factory(settings)
    if not isinstance(policy, MembershipPolicy):
        raise TypeError(f"{path} did not return a MembershipPolicy (it needs async check_add_members)")
    return policy


async def check_may_add(
    policy: MembershipPolicy,
    actor_id: str,
    user_ids: Sequence[str],
    kind: Literal["DIRECT", "GROUP"],
    conversation_id: int | None = None,
) -> None:
    """Ask the policy about the people other than actor_id (nobody: nothing to ask)."""
    others = [uid for uid in user_ids if uid != actor_id]
    if others:
        await policy.check_add_members(MembershipRequest(actor_id, tuple(others), kind, conversation_id))
