"""The read-state rules written once as a small model, and the real API driven against it.

A Hypothesis state machine sends, replies (to the thread only, or also to the conversation), reads,
marks unread, delivers, deletes, edits (with their mentions), mutes, switches private receipts (per
conversation and as the user's default), leaves and rejoins, reads threads (on one device or two at
once), follows and unfollows them, over three users in two fresh groups per
example (user 0 owns both and never leaves), through GraphQL over HTTP against the session's server
on real PostgreSQL. Every mutation's answer is compared with the model and with a query read right
after it; after every step each user's conversations, inbox rows, viewer totals, followed threads
(myThreads) and thread totals are compared with the model, and no count may be below 0, and totalUnread must be the sum of the unmuted conversations'
unreadCount.

Each example starts from a first state drawn at once (private defaults, messages, reads, deletes, replies,
rewinds and reads again, each checked as a step is), and read, markUnread and delete come twice as
often as the other steps: the counts' defects need a few of those in a row, and a bounded run must
reach them (it found each of unread going negative with private receipts and deletes, and a
markRead answer disagreeing with the query after it, before they were fixed).

The rules, as the docs state them (docs/guide/read-state.md):
- a member has a public watermark (what others see: seenByCount) and an own read position (what
  lastReadSeq and unreadCount say); markRead raises both (only the own one with private
  receipts), never lowers either; markUnread(fromSeq) lowers the own one to fromSeq - 1 at most;
  a send raises the sender's watermark and own position to their message;
- unreadCount: the messages above the own read position that are neither deleted nor thread-only
  replies (firstUnreadSeq: the
  first of them, null when none); unreadMentions: of
  those, the ones that mention the viewer as the message mentions now (an edit replaces them);
- threads (docs/guide/threads.md): a reply joins its root's thread (the root of the message it quotes),
  numbered gap-free there; a member's thread watermark is raised by markThreadRead (clamped, never
  lowered) and by their own reply; thread unreadCount: the replies above it not deleted
  (firstUnreadReplySeq: the first); the root's author and each replier follow (an unfollow holds for
  the author, a reply follows again); myThreads: the followed threads with a reply in the member's
  conversations, newest reply first; threadUnread/unreadThreads: their sum and how many are unread;
- thread catch-up (docs/guide/threads.md#catch-up): a device of each member syncs its threads
  (sync(afterThreadVersion:), in pages of two) after the first state, at random points and when the
  example ends, from the lastThreadVersion it held; each time it holds every thread the member follows as the model has it,
  and any other thread it holds as not followed;
- delivered: the higher of the delivered mark and the watermark; private receipts freeze both;
- leaving drops the membership; being added again starts with nothing unread, the user's default.

The machine runs in a thread of its own (Hypothesis drives it synchronously); each call runs on the
test's event loop, where the server and the HTTP client live.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from chatgql.graphql.ids import message_id
from tests.support.live import ChatApi

from .test_fuzz import SETTINGS

USERS = 3  # user 0 owns both groups and never leaves
CONVS = 2
SEQ = st.integers(0, 6)
WHO = st.integers(0, USERS - 1)
MEMBER_ONLY = st.integers(1, USERS - 1)
CONV = st.sampled_from([0, 0, 1])  # the first group more often: longer histories there
MENTIONED = st.frozensets(WHO, max_size=2)

CONVERSATION = (
    "id lastSeq lastReadSeq unreadCount firstUnreadSeq unreadMentions muted privateReceipts"
    " lastMessage { seq seenByCount deliveredCount }"
)
SEND = """
mutation($c: ID!, $m: UUID!, $b: String!, $mentions: [ID!], $all: Boolean) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, mentions: $mentions, mentionEveryone: $all) {
    message { seq mentions } } }
"""
REPLY = """
mutation($c: ID!, $m: UUID!, $b: String!, $r: ID!, $t: Boolean!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r, threadOnly: $t) { message { seq } } }
"""
READ = """
mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { conversationId lastReadSeq advanced unreadCount } }
"""
UNREAD = f"mutation($c: ID!, $s: Long!) {{ markUnread(conversationId: $c, fromSeq: $s) {{ {CONVERSATION} }} }}"
DELIVER = "mutation($c: ID!, $s: Long!) { markDelivered(conversationId: $c, seq: $s) { deliveredSeq advanced } }"
MEMBERSHIP = f"""
mutation($c: ID!, $mu: Boolean, $p: Boolean) {{
  updateMembership(conversationId: $c, muted: $mu, privateReceipts: $p) {{ {CONVERSATION} }} }}
"""
DEFAULT = "mutation($p: Boolean!) { updateViewerSettings(privateReceipts: $p) { privateReceipts } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { message { seq body } } }"
EDIT = """
mutation($c: ID!, $s: Long!, $b: String!, $mentions: [ID!]) {
  editMessage(conversationId: $c, seq: $s, body: $b, mentions: $mentions) { message { seq body mentions } } }
"""
LEAVE = "mutation($c: ID!) { leaveGroup(conversationId: $c) { userId } }"
ADD = "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }"
VIEWER = "viewer { totalUnread unreadConversations totalUnreadMentions privateReceipts threadUnread unreadThreads }"
INBOX = "inbox(first: 20) { nodes { id lastReadSeq unreadCount firstUnreadSeq } }"
THREAD = "rootSeq lastReplySeq lastReadReplySeq unreadCount firstUnreadReplySeq replyCount following"
MY_THREADS = f"myThreads(first: 50) {{ nodes {{ conversationId {THREAD} }} }}"
MARK_THREAD = f"mutation($r: ID!, $s: Long!) {{ markThreadRead(rootId: $r, replySeq: $s) {{ {THREAD} }} }}"
FOLLOW = f"mutation($r: ID!) {{ followThread(rootId: $r) {{ {THREAD} }} }}"
UNFOLLOW = f"mutation($r: ID!) {{ unfollowThread(rootId: $r) {{ {THREAD} }} }}"
SYNC_THREADS = f"""
query($cursors: [SyncCursor!]!) {{
  sync(cursors: $cursors, limit: 2) {{ lastThreadVersion threadsHaveMore threads {{ version {THREAD} }} }}
}}
"""

_example_users = itertools.count(7_000_000, USERS)  # fresh users per example: their totals start at 0


# --- the model -------------------------------------------------------------------------------


@dataclass
class Member:
    public: int  # the watermark others see
    own: int  # the member's own read position
    delivered: int = 0
    muted: bool = False
    private: bool | None = None  # this conversation's choice; None: the user's default


@dataclass
class Msg:
    sender: int
    mentions: frozenset[int]
    deleted: bool = False
    thread_only: bool = False  # a reply sent to its thread only: not in the conversation's unread
    root: int | None = None  # a reply: its thread's root seq


@dataclass
class ThreadMember:
    read: int = 0  # the thread watermark (a reply seq)
    following: bool = True


@dataclass
class Thread:
    replies: list[int] = field(default_factory=list)  # reply seq - 1 -> the reply's conversation seq
    members: dict[int, ThreadMember] = field(default_factory=dict)
    activity: int = 0  # when its newest reply was sent (a counter over the whole example)


@dataclass
class Conv:
    id: str
    messages: dict[int, Msg] = field(default_factory=dict)  # seq -> message
    members: dict[int, Member] = field(default_factory=dict)
    threads: dict[int, Thread] = field(default_factory=dict)  # root seq -> its thread (with a reply)

    @property
    def last_seq(self) -> int:
        return len(self.messages)

    def unread(self, who: int, above: int | None = None) -> int:
        start = self.members[who].own if above is None else above
        return sum(1 for seq, msg in self.messages.items() if seq > start and not msg.deleted and not msg.thread_only)

    def first_unread(self, who: int) -> int | None:
        own = self.members[who].own
        unread = (seq for seq, msg in self.messages.items() if seq > own and not msg.deleted and not msg.thread_only)
        return min(unread, default=None)

    def unread_mentions(self, who: int) -> int:
        own = self.members[who].own
        return sum(1 for seq, msg in self.messages.items() if seq > own and not msg.deleted and who in msg.mentions)

    def root_of(self, seq: int) -> int:
        root = self.messages[seq].root
        return seq if root is None else root

    def thread(self, root: int, who: int) -> dict:
        """What thread(rootId:) answers to who (a thread without a reply: no Thread yet)."""
        thread = self.threads.get(root, Thread())
        member = thread.members.get(who)
        read = 0 if member is None else member.read
        unread = [n for n, seq in enumerate(thread.replies, 1) if n > read and not self.messages[seq].deleted]
        return {
            "rootSeq": root,
            "lastReplySeq": len(thread.replies),
            "lastReadReplySeq": read,
            "unreadCount": len(unread),
            "firstUnreadReplySeq": min(unread, default=None),
            "replyCount": sum(not self.messages[seq].deleted for seq in thread.replies),
            "following": member is not None and member.following,
        }


class ReadStateModel:
    def __init__(self, conv_ids: list[str]) -> None:
        self.convs = [Conv(cid) for cid in conv_ids]
        self.default_private = [False] * USERS

    def private(self, conv: Conv, who: int) -> bool:
        choice = conv.members[who].private
        return self.default_private[who] if choice is None else choice

    def conversation(self, conv: Conv, who: int) -> dict:
        member = conv.members[who]
        last = conv.last_seq
        last_message = None
        if last:
            others = [m for uid, m in conv.members.items() if uid != conv.messages[last].sender]
            last_message = {
                "seq": last,
                "seenByCount": sum(m.public >= last for m in others),
                "deliveredCount": sum(max(m.delivered, m.public) >= last for m in others),
            }
        return {
            "id": conv.id,
            "lastSeq": last,
            "lastReadSeq": member.own,
            "unreadCount": conv.unread(who),
            "firstUnreadSeq": conv.first_unread(who),
            "unreadMentions": conv.unread_mentions(who),
            "muted": member.muted,
            "privateReceipts": self.private(conv, who),
            "lastMessage": last_message,
        }

    def my_threads(self, who: int) -> list[dict]:
        """myThreads: the followed threads with a reply in who's conversations, newest reply first."""
        followed = [
            (thread.activity, {"conversationId": c.id, **c.thread(root, who)})
            for c in self.convs
            if who in c.members
            for root, thread in c.threads.items()
            if thread.replies and who in thread.members and thread.members[who].following
        ]
        return [node for _, node in sorted(followed, key=lambda pair: -pair[0])]

    def viewer(self, who: int) -> dict:
        mine = [(c, c.members[who]) for c in self.convs if who in c.members]
        unmuted = [c.unread(who) for c, m in mine if not m.muted]
        threads = [node["unreadCount"] for node in self.my_threads(who)]
        return {
            "totalUnread": sum(unmuted),
            "unreadConversations": sum(n > 0 for n in unmuted),
            "totalUnreadMentions": sum(c.unread_mentions(who) for c, _ in mine),
            "privateReceipts": self.default_private[who],
            "threadUnread": sum(threads),
            "unreadThreads": sum(n > 0 for n in threads),
        }


# --- the machine -----------------------------------------------------------------------------


def code(body: dict) -> str | None:
    errors = body.get("errors")
    return errors[0]["extensions"]["code"] if errors else None


class ReadStateMachine(RuleBasedStateMachine):
    api: ChatApi
    loop: asyncio.AbstractEventLoop

    def call(self, awaitable: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(awaitable, self.loop).result(timeout=120)

    def run(self, query: str, variables: dict | None, who: int) -> dict:
        return self.call(self.api.execute(query, variables, user=self.users[who]))

    def ok(self, query: str, variables: dict | None, who: int) -> dict:
        body = self.run(query, variables, who)
        assert "errors" not in body, body["errors"]
        return body["data"]

    def refused(self, body: dict, expected: str) -> None:
        assert code(body) == expected, body

    @initialize(
        private=st.lists(st.booleans(), min_size=USERS, max_size=USERS),
        sent=st.integers(0, 5),
        read=st.lists(SEQ, min_size=USERS, max_size=USERS),
        deleted=st.frozensets(st.integers(1, 5), max_size=3),
        unread_from=st.lists(st.none() | st.integers(1, 5), min_size=USERS, max_size=USERS),
        read_again=st.lists(st.none() | SEQ, min_size=USERS, max_size=USERS),
        replies=st.lists(st.tuples(WHO, st.integers(1, 5), st.booleans()), max_size=4),
    )
    def start(
        self,
        private: list[bool],
        sent: int,
        read: list[int],
        deleted: frozenset[int],
        unread_from: list[int | None],
        read_again: list[int | None],
        replies: list[tuple[int, int, bool]],
    ) -> None:
        """Fresh users and groups, and a first state drawn at once, each operation checked as a step's
        (so that the steps start where the counts are made): each user's default for private receipts;
        `sent` messages of user 0's in the first group (one in the second), read by each user up to
        read[user], the `deleted` ones deleted, then marked unread from unread_from[user] and read again
        up to read_again[user] by each user with one; then `replies` (user, the message it quotes, thread-only)."""
        base = next(_example_users)
        self.users = [str(base + i) for i in range(USERS)]
        self.bodies = itertools.count()
        self.activity = itertools.count(1)
        ids = [self.call(self.api.create_group(self.users[0], self.users[1:])) for _ in range(CONVS)]
        self.model = ReadStateModel(ids)
        # each member's device: per conversation, the thread version it holds and the threads it got
        self.devices: dict[tuple[int, int], tuple[int, dict[int, dict]]] = {}
        for conv in self.model.convs:
            conv.members = {who: Member(0, 0) for who in range(USERS)}
        for who, choice in enumerate(private):
            if choice:
                self.change_setting(0, who, "default", True)
        for c, count in enumerate([sent] + [1] * (CONVS - 1)):
            for _ in range(count):
                self.send(c, 0, frozenset(), False)
        for who, seq in enumerate(read):
            self.read(0, who, seq)
        for seq in sorted(deleted):
            self.delete(0, seq, False)
        for who, from_seq in enumerate(unread_from):
            if from_seq is not None:
                self.mark_unread(0, who, from_seq)
        for who, seq in enumerate(read_again):
            if seq is not None:
                self.read(0, who, seq)
        for who, to, thread_only in replies:  # threads to read, follow and delete in
            self.reply(0, who, to, thread_only)
        for c in range(CONVS):  # each device holds a thread version from here: the steps reach it as changes
            for who in range(USERS):
                self.sync_threads(c, who)

    def conv_of(self, who: int, c: int) -> Conv | None:
        conv = self.model.convs[c]
        return conv if who in conv.members else None

    def after_answer(self, conv: Conv, who: int, answer: dict) -> None:
        """A mutation's Conversation answer: the model's, and what a query right after it reads."""
        query = f"query($c: ID!) {{ conversation(id: $c) {{ {CONVERSATION} }} }}"
        read_back = self.ok(query, {"c": conv.id}, who)["conversation"]
        assert answer == read_back, ("the answer disagrees with the query right after it", answer, read_back)
        assert answer == self.model.conversation(conv, who)

    # --- rules ---

    @rule(c=CONV, who=WHO, mentioned=MENTIONED, everyone=st.booleans())
    def send(self, c: int, who: int, mentioned: frozenset[int], everyone: bool) -> None:
        conv = self.model.convs[c]
        variables = {
            "c": conv.id,
            "m": str(uuid.uuid4()),
            "b": f"m{next(self.bodies)}",
            "mentions": [self.users[u] for u in sorted(mentioned)],
            "all": everyone,
        }
        body = self.run(SEND, variables, who)
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        if any(u not in conv.members for u in mentioned):
            return self.refused(body, "BAD_USER_INPUT")
        if everyone and who != 0:
            return self.refused(body, "FORBIDDEN")
        assert "errors" not in body, body
        seq = conv.last_seq + 1
        named = set(mentioned) | ({u for u in conv.members if u != who} if everyone else set())
        conv.messages[seq] = Msg(who, frozenset(named))
        sender = conv.members[who]
        sender.public = sender.own = seq
        message = body["data"]["sendMessage"]["message"]
        assert message == {"seq": seq, "mentions": sorted(self.users[u] for u in named)}

    @rule(c=CONV, who=WHO, to=st.integers(1, 6), thread_only=st.booleans())
    def reply(self, c: int, who: int, to: int, thread_only: bool) -> None:
        """A reply (sendMessage(replyTo:)), sent to its thread only or also to the conversation."""
        conv = self.model.convs[c]
        variables = {
            "c": conv.id,
            "m": str(uuid.uuid4()),
            "b": f"m{next(self.bodies)}",
            "r": message_id(int(conv.id), to),
        }
        body = self.run(REPLY, {**variables, "t": thread_only}, who)
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        if to > conv.last_seq:
            return self.refused(body, "BAD_USER_INPUT")
        assert "errors" not in body, body
        seq = conv.last_seq + 1
        root = conv.root_of(to)
        conv.messages[seq] = Msg(who, frozenset(), thread_only=thread_only, root=root)
        sender = conv.members[who]
        sender.public = sender.own = seq
        assert body["data"]["sendMessage"]["message"] == {"seq": seq}
        thread = conv.threads.setdefault(root, Thread())
        thread.replies.append(seq)
        thread.activity = next(self.activity)
        thread.members.setdefault(conv.messages[root].sender, ThreadMember())  # the root's author follows
        replier = thread.members.setdefault(who, ThreadMember())
        replier.read, replier.following = len(thread.replies), True  # a reply reads up to it, and follows again

    def thread_call(self, query: str, c: int, who: int, to: int, variables: dict) -> tuple[Conv, int, dict] | None:
        """Run a thread mutation on the thread of message `to`: None when refused as the model says."""
        conv = self.model.convs[c]
        body = self.run(query, {"r": message_id(int(conv.id), to), **variables}, who)
        if who not in conv.members or to not in conv.messages:
            self.refused(body, "NOT_FOUND")
            return None
        assert "errors" not in body, body
        return conv, conv.root_of(to), next(iter(body["data"].values()))

    @rule(c=CONV, who=WHO, to=st.integers(1, 7), reply_seq=st.integers(0, 4))
    def read_thread(self, c: int, who: int, to: int, reply_seq: int) -> None:
        """markThreadRead: the watermark rises to reply_seq clamped to the thread's last reply, never lowers."""
        done = self.thread_call(MARK_THREAD, c, who, to, {"s": reply_seq})
        if done is None:
            return
        conv, root, answer = done
        thread = conv.threads.get(root)
        if thread is not None:
            member = thread.members.setdefault(who, ThreadMember(following=False))  # reading does not follow
            member.read = max(member.read, min(reply_seq, len(thread.replies)))
        assert answer == conv.thread(root, who)

    @rule(c=CONV, who=WHO, to=st.integers(1, 7), seqs=st.tuples(st.integers(0, 4), st.integers(0, 4)))
    def read_thread_on_two_devices(self, c: int, who: int, to: int, seqs: tuple[int, int]) -> None:
        """Two of who's devices mark the same thread read at once: the higher one wins."""
        conv = self.model.convs[c]
        if who not in conv.members or to not in conv.messages:
            return
        root_id = message_id(int(conv.id), to)

        async def both() -> list[dict]:
            return await asyncio.gather(
                *(self.api.execute(MARK_THREAD, {"r": root_id, "s": s}, user=self.users[who]) for s in seqs)
            )

        bodies = self.call(both())
        assert all("errors" not in body for body in bodies), bodies
        root = conv.root_of(to)
        thread = conv.threads.get(root)
        if thread is not None:
            member = thread.members.setdefault(who, ThreadMember(following=False))
            member.read = max(member.read, min(max(seqs), len(thread.replies)))
        for body in bodies:  # each answer is at or below the final state, never above it
            assert body["data"]["markThreadRead"]["lastReadReplySeq"] <= conv.thread(root, who)["lastReadReplySeq"]

    @rule(c=CONV, who=WHO, to=st.integers(1, 7), follow=st.booleans())
    def follow_thread(self, c: int, who: int, to: int, follow: bool) -> None:
        done = self.thread_call(FOLLOW if follow else UNFOLLOW, c, who, to, {})
        if done is None:
            return
        conv, root, answer = done
        thread = conv.threads.setdefault(root, Thread())
        thread.members.setdefault(who, ThreadMember()).following = follow
        assert answer == conv.thread(root, who)

    @rule(c=CONV, who=WHO, seq=SEQ)
    def read(self, c: int, who: int, seq: int) -> None:
        conv = self.model.convs[c]
        body = self.run(READ, {"c": conv.id, "s": seq}, who)
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        assert "errors" not in body, body
        member, target = conv.members[who], min(seq, conv.last_seq)
        advanced = not self.model.private(conv, who) and target > member.public
        if advanced:
            member.public = target
        member.own = max(member.own, target)
        answer = body["data"]["markRead"]
        state = self.model.conversation(conv, who)
        read_back = self.ok(f"query($c: ID!) {{ conversation(id: $c) {{ {CONVERSATION} }} }}", {"c": conv.id}, who)
        shown = {k: read_back["conversation"][k] for k in ("lastReadSeq", "unreadCount")}
        told = {k: answer[k] for k in ("lastReadSeq", "unreadCount")}
        assert told == shown, ("markRead's answer disagrees with the query right after it", told, shown)
        assert answer == {
            "conversationId": conv.id,
            "lastReadSeq": state["lastReadSeq"],
            "advanced": advanced,
            "unreadCount": state["unreadCount"],
        }

    @rule(c=CONV, who=WHO, seqs=st.tuples(SEQ, SEQ))
    def read_on_two_devices(self, c: int, who: int, seqs: tuple[int, int]) -> None:
        """Two devices of one user at once: the later wins, both only raise, so the higher stays;
        each answer is a state that was true after its own call (its unread matches its position)."""
        conv = self.conv_of(who, c)
        if conv is None:
            return
        member = conv.members[who]
        before = member.own

        async def both() -> list[dict]:
            return list(
                await asyncio.gather(
                    *(self.api.execute(READ, {"c": conv.id, "s": s}, user=self.users[who]) for s in seqs)
                )
            )

        answers = self.call(both())
        target = min(max(seqs), conv.last_seq)
        if not self.model.private(conv, who):
            member.public = max(member.public, target)
        member.own = max(member.own, target)
        for s, body in zip(seqs, answers, strict=True):
            assert "errors" not in body, body
            answer = body["data"]["markRead"]
            assert max(before, min(s, conv.last_seq)) <= answer["lastReadSeq"] <= member.own, (answer, seqs)
            assert answer["unreadCount"] == conv.unread(who, above=answer["lastReadSeq"]), (answer, seqs)

    @rule(c=CONV, who=WHO, from_seq=SEQ)
    def mark_unread(self, c: int, who: int, from_seq: int) -> None:
        conv = self.model.convs[c]
        body = self.run(UNREAD, {"c": conv.id, "s": from_seq}, who)
        if from_seq < 1:
            return self.refused(body, "BAD_USER_INPUT")
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        if from_seq > conv.last_seq:
            return self.refused(body, "BAD_USER_INPUT")
        assert "errors" not in body, body
        member = conv.members[who]
        member.own = min(member.own, from_seq - 1)
        self.after_answer(conv, who, body["data"]["markUnread"])

    # read, markUnread and delete, the operations of which the counts are made, come twice as often
    @rule(c=CONV, who=WHO, seq=SEQ)
    def read_more(self, c: int, who: int, seq: int) -> None:
        self.read(c, who, seq)

    @rule(c=CONV, who=WHO, from_seq=SEQ)
    def mark_unread_more(self, c: int, who: int, from_seq: int) -> None:
        self.mark_unread(c, who, from_seq)

    @rule(c=CONV, seq=st.integers(1, 6), by_sender=st.booleans())
    def delete_more(self, c: int, seq: int, by_sender: bool) -> None:
        self.delete(c, seq, by_sender)

    @rule(c=CONV, pick=st.integers(0, 7), by_sender=st.booleans())
    def delete_reply(self, c: int, pick: int, by_sender: bool) -> None:
        """Delete one of the thread replies (the delete rule above, aimed at a reply)."""
        replies = [seq for thread in self.model.convs[c].threads.values() for seq in thread.replies]
        if replies:
            self.delete(c, replies[pick % len(replies)], by_sender)
            for who in range(USERS):  # a deleted reply reaches the followers' devices as a change of its own
                self.sync_threads(c, who)

    @rule(c=CONV, who=WHO, seq=SEQ)
    def deliver(self, c: int, who: int, seq: int) -> None:
        conv = self.model.convs[c]
        body = self.run(DELIVER, {"c": conv.id, "s": seq}, who)
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        assert "errors" not in body, body
        member = conv.members[who]
        before = max(member.delivered, member.public)
        if not self.model.private(conv, who):
            member.delivered = max(member.delivered, min(seq, conv.last_seq))
        after = max(member.delivered, member.public)
        assert body["data"]["markDelivered"] == {"deliveredSeq": after, "advanced": after > before}

    @rule(c=CONV, seq=st.integers(1, 6), by_sender=st.booleans())
    def delete(self, c: int, seq: int, by_sender: bool) -> None:
        conv = self.model.convs[c]
        msg = conv.messages.get(seq)
        who = msg.sender if by_sender and msg is not None else 0
        body = self.run(DELETE, {"c": conv.id, "s": seq}, who)
        if who not in conv.members or msg is None:
            return self.refused(body, "NOT_FOUND")
        if msg.deleted:
            return self.refused(body, "CONFLICT")
        assert "errors" not in body, body
        msg.deleted = True
        msg.mentions = frozenset()
        assert body["data"]["deleteMessage"]["message"] == {"seq": seq, "body": ""}

    @rule(c=CONV, seq=st.integers(1, 6), mentioned=st.none() | MENTIONED)
    def edit(self, c: int, seq: int, mentioned: frozenset[int] | None) -> None:
        """The sender edits their message, with new mentions (None: it keeps them)."""
        conv = self.model.convs[c]
        msg = conv.messages.get(seq)
        if msg is None:
            return
        variables: dict[str, Any] = {"c": conv.id, "s": seq, "b": f"e{next(self.bodies)}"}
        if mentioned is not None:
            variables["mentions"] = [self.users[u] for u in sorted(mentioned)]
        body = self.run(EDIT, variables, msg.sender)
        if msg.sender not in conv.members:
            return self.refused(body, "NOT_FOUND")
        if msg.deleted:
            return self.refused(body, "CONFLICT")
        if mentioned is not None and any(u not in conv.members for u in mentioned):
            return self.refused(body, "BAD_USER_INPUT")
        assert "errors" not in body, body
        if mentioned is not None:
            msg.mentions = mentioned
        edited = body["data"]["editMessage"]["message"]
        assert edited["mentions"] == sorted(self.users[u] for u in msg.mentions)

    @rule(c=CONV, who=WHO, setting=st.sampled_from(["muted", "privateReceipts", "default"]), value=st.booleans())
    def change_setting(self, c: int, who: int, setting: str, value: bool) -> None:
        """updateMembership(muted:) or (privateReceipts:) of one conversation, or the user's default for
        private receipts (updateViewerSettings), which applies where the member made no choice."""
        if setting == "default":
            data = self.ok(DEFAULT, {"p": value}, who)
            self.model.default_private[who] = value
            assert data["updateViewerSettings"] == {"privateReceipts": value}
            return
        conv = self.model.convs[c]
        body = self.run(
            MEMBERSHIP, {"c": conv.id, "mu": value} if setting == "muted" else {"c": conv.id, "p": value}, who
        )
        if who not in conv.members:
            return self.refused(body, "NOT_FOUND")
        assert "errors" not in body, body
        if setting == "muted":
            conv.members[who].muted = value
        else:
            conv.members[who].private = value
        self.after_answer(conv, who, body["data"]["updateMembership"])

    @rule(c=CONV, who=WHO)
    def sync_threads(self, c: int, who: int) -> None:
        """who's device syncs its threads of the conversation from the version it holds, a page of two at a
        time, and then holds every thread who follows as the model has it (and any other as not followed)."""
        conv = self.model.convs[c]
        if who not in conv.members:
            return
        held, threads = self.devices.get((who, c), (0, {}))
        while True:
            cursors = [{"conversationId": conv.id, "afterSeq": 0, "afterThreadVersion": held}]
            page = self.ok(SYNC_THREADS, {"cursors": cursors}, who)["sync"][0]
            versions = [t.pop("version") for t in page["threads"]]
            assert versions == sorted(versions) and all(v > held for v in versions), (held, versions)
            threads.update((t["rootSeq"], t) for t in page["threads"])
            if not page["threadsHaveMore"]:
                held = page["lastThreadVersion"]
                break
            held = versions[-1]
        self.devices[(who, c)] = (held, threads)
        for root in conv.threads:
            now = conv.thread(root, who)
            if now["following"]:
                assert threads.get(root) == now, ("the device did not converge", who, root, threads.get(root), now)
        for root, kept in threads.items():
            assert kept["following"] == conv.thread(root, who)["following"], (who, root, kept)

    def teardown(self) -> None:
        """The example's end: every member's device syncs its threads once more and converges."""
        if hasattr(self, "model"):
            for c in range(CONVS):
                for who in range(USERS):
                    self.sync_threads(c, who)

    @rule(c=CONV, who=MEMBER_ONLY)
    def leave_or_rejoin(self, c: int, who: int) -> None:
        """A member leaves (leaveGroup); one who left is added again by the owner (addMembers)."""
        conv = self.model.convs[c]
        if who in conv.members:
            self.ok(LEAVE, {"c": conv.id}, who)
            del conv.members[who]
        else:
            self.ok(ADD, {"c": conv.id, "u": [self.users[who]]}, 0)
            conv.members[who] = Member(conv.last_seq, conv.last_seq)

    # --- after every step ---

    @invariant()
    def every_count_matches_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        for who in range(USERS):
            mine = [c for c in self.model.convs if who in c.members]
            fields = " ".join(f"c{i}: conversation(id: {c.id!r}) {{ {CONVERSATION} }}" for i, c in enumerate(mine))
            data = self.ok(f"{{ {fields} {VIEWER} {INBOX} {MY_THREADS} }}".replace("'", '"'), None, who)
            got = [data[f"c{i}"] for i in range(len(mine))]
            viewer = data["viewer"]
            counts = [c["unreadCount"] for c in got] + [c["unreadMentions"] for c in got]
            counts += [n["unreadCount"] for n in data["inbox"]["nodes"]]
            counts += [viewer["totalUnread"], viewer["unreadConversations"], viewer["totalUnreadMentions"]]
            counts += [n["unreadCount"] for n in data["myThreads"]["nodes"]]
            assert min(counts) >= 0, ("a count below 0", who, data)
            assert viewer["totalUnread"] == sum(c["unreadCount"] for c in got if not c["muted"]), (who, data)
            rows = {n["id"]: n for n in data["inbox"]["nodes"]}
            for c in got:
                assert rows[c["id"]] == {k: c[k] for k in ("id", "lastReadSeq", "unreadCount", "firstUnreadSeq")}, (
                    who,
                    rows,
                    c,
                )
            assert got == [self.model.conversation(c, who) for c in mine], (who, self.users[who])
            assert viewer == self.model.viewer(who), (who, self.users[who])
            assert data["myThreads"]["nodes"] == self.model.my_threads(who), (who, self.users[who])
            assert sorted(rows) == sorted(c.id for c in mine), (who, rows)


# Passing takes under a minute; a failure is shrunk before it is reported, which may take minutes more.
@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_read_state_matches_the_model_through_random_operations(server, http):
    ReadStateMachine.api = ChatApi.of(server, http)
    ReadStateMachine.loop = asyncio.get_running_loop()
    machine_settings = settings(max_examples=100, stateful_step_count=8, **SETTINGS)
    await asyncio.to_thread(run_state_machine_as_test, ReadStateMachine, settings=machine_settings)
