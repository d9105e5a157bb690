"""The operations GraphiQL opens with: one tab each, a one-line comment on top.

tests/graphql/test_graphiql_examples.py runs every one against a real server, so an
example that no longer matches the schema fails the suite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# Replaced by a fresh UUID each time the page is served: the send example is a new message.
CLIENT_MSG_ID = "{clientMsgId}"


@dataclass(frozen=True)
class Example:
    query: str
    variables: dict = field(default_factory=dict)


EXAMPLES = [
    Example(
        """# The inbox: your conversations, newest activity first, with unread badges and the total unread.
query Inbox {
  viewer { userId totalUnread unreadConversations }
  inbox(first: 20) {
    nodes { id type title lastSeq unreadCount lastMessage { seq senderId body } }
  }
}
"""
    ),
    Example(
        """# Start a conversation: a group with users 2 and 3 (createDirectConversation(userId:) for a 1-1 chat).
mutation StartGroup($title: String!, $memberIds: [ID!]!) {
  createGroup(title: $title, memberIds: $memberIds) { id type title memberCount }
}
""",
        {"title": "team", "memberIds": ["2", "3"]},
    ),
    Example(
        """# A history page: the newest 20 messages; page backward with before: the pageInfo.startCursor you got.
query History($c: ID!, $before: String) {
  messages(conversationId: $c, last: 20, before: $before) {
    nodes { seq senderId body createdAt seen seenByCount }
    pageInfo { hasPreviousPage startCursor }
  }
}
""",
        {"c": "1", "before": None},
    ),
    Example(
        """# Send: idempotent on clientMsgId; run it again unchanged and get the same seq with duplicate: true.
mutation Send($c: ID!, $clientMsgId: UUID!, $body: String!) {
  sendMessage(conversationId: $c, clientMsgId: $clientMsgId, body: $body) {
    duplicate
    message { seq senderId body createdAt }
  }
}
""",
        {"c": "1", "clientMsgId": CLIENT_MSG_ID, "body": "hello from GraphiQL"},
    ),
    Example(
        """# markRead: move your watermark up to seq (never backward); unread counts and "seen" follow from it.
mutation MarkRead($c: ID!, $seq: Long!) {
  markRead(conversationId: $c, seq: $seq) { lastReadSeq advanced unreadCount }
}
""",
        {"c": "1", "seq": 1},
    ),
    Example(
        """# Live: every new message in all of your conversations as it is stored (send one from another tab).
subscription Live {
  messageNew { conversationId seq message { senderId body } }
}
"""
    ),
    Example(
        """# Resume with cursors: what came after the seq you hold, then live, with no gap and no duplicate.
subscription Resume($cursors: [SyncCursor!]) {
  messageNew(cursors: $cursors) { conversationId seq message { senderId body } }
}
""",
        {"cursors": [{"conversationId": "1", "afterSeq": 0}]},
    ),
    Example(
        """# Catch up after being offline: per conversation, the messages after the seq you hold.
query Sync($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors, limit: 50) { conversationId lastSeq lastReadSeq hasMore messages { seq senderId body } }
}
""",
        {"cursors": [{"conversationId": "1", "afterSeq": 0}]},
    ),
    Example(
        """# Catch up on threads: the threads of yours that changed after the thread version you hold (0: all), as they are now.
query SyncThreads($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors, limit: 50) {
    conversationId lastThreadVersion threadsHaveMore
    threads { rootSeq version following lastReplySeq lastReadReplySeq unreadCount }
  }
}
""",
        {"cursors": [{"conversationId": "1", "afterSeq": 0, "afterThreadVersion": 0}]},
    ),
    Example(
        """# Quotes and forwards: sendMessage(quote: <Message.id>) quotes, forwardMessage copies; each reader sees what they may.
query Quotes($c: ID!) {
  messages(conversationId: $c, last: 20) {
    nodes { seq body forwarded quote { state message { conversationId seq senderId body deletedAt } } }
  }
}
""",
        {"c": "1"},
    ),
    Example(
        """# Saved messages: saveMessage(conversationId:, seq:, remindAt:) saves; your list, newest save first.
query Saved($after: String) {
  savedMessages(first: 20, after: $after) {
    nodes { conversationId seq savedAt remindAt remindedAt message { senderId body } }
    hasNextPage endCursor version
  }
}
""",
        {"after": None},
    ),
    Example(
        """# Threads: those you follow, newest activity first, with their unread; markThreadRead(rootId:, replySeq:) reads one.
query MyThreads {
  viewer { threadUnread unreadThreads }
  myThreads(first: 20) {
    nodes { rootSeq conversationId replyCount unreadCount firstUnreadReplySeq root { body } lastReply { senderId body } }
    pageInfo { hasNextPage endCursor }
  }
}
"""
    ),
    Example(
        """# Moderation: who you blocked; blockUser(userId:) and reportMessage(conversationId:, seq:, reason:) act.
query Blocked {
  viewer { blockedUsers(first: 20) { userId blockedAt } }
}
"""
    ),
    Example(
        """# Your scheduled messages, soonest first; scheduleMessage(..., sendAt:) adds one, cancelScheduledMessage(id:).
query Scheduled {
  scheduledMessages { id conversationId state sendAt body failureReason }
}
"""
    ),
    Example(
        """# Disappearing messages: each message sent from now on is erased a day after it was sent (0: off).
mutation Disappearing($c: ID!) {
  setMessageTtl(conversationId: $c, seconds: 86400) { id messageTtlSeconds }
}
""",
        {"c": "1"},
    ),
    Example(
        """# Drafts: save what you are typing (body "" clears it); your other devices get it (draftUpdated, drafts).
mutation SaveDraft($c: ID!, $body: String!) {
  saveDraft(conversationId: $c, body: $body) { conversationId replyTo body version updatedAt }
}
""",
        {"c": "1", "body": "half a thought"},
    ),
    Example(
        """# Presence: who of these users is online and when each was last seen, as they let you see it.
query Presence($userIds: [ID!]!) {
  presence(userIds: $userIds) { userId visible online lastSeenAt }
}
""",
        {"userIds": ["2", "3"]},
    ),
    Example(
        """# Pinned messages, the newest pin first; pinMessage(conversationId:, seq:) pins one, unpinMessage unpins it.
query Pinned($c: ID!) {
  pinnedMessages(conversationId: $c) { seq pinnedBy pinnedAt expiresAt message { senderId body } }
}
""",
        {"c": "1"},
    ),
]

# The Headers tab of every example. The page signs in for you in development (its Sign-in
# panel); otherwise the token comes from `chatgql token <user id>`.
PLACEHOLDER_DEV = "Bearer <sign in with the key icon on the left, or paste: chatgql token 1>"
PLACEHOLDER = "Bearer <paste a token: chatgql token 1>"


def default_tabs(*, dev_sign_in: bool, client_msg_id: str) -> list[dict[str, str]]:
    """GraphiQL's defaultTabs: the examples with their variables and headers, as JSON text."""
    headers = json.dumps({"Authorization": PLACEHOLDER_DEV if dev_sign_in else PLACEHOLDER}, indent=2)
    return [
        {
            "query": example.query,
            "variables": json.dumps(example.variables, indent=2).replace(CLIENT_MSG_ID, client_msg_id),
            "headers": headers,
        }
        for example in EXAMPLES
    ]
