"""A client offline through random edits, deletes and reactions converges to exactly the server's state by
sync with the two cursors it holds (afterSeq, afterChangeSeq): the changes it gets, applied in changeSeq
order on top of what it held and the new messages, give every message as the server has it. The random
operations are checked against a model as they go (change seqs gap-free, message seqs untouched)."""

from __future__ import annotations

import random

import pytest

from ..support.live import ChatApi

FIELDS = "seq body editedAt deletedAt deletedBy reactions { emoji count reactedByViewer }"
PAGE = (
    f"query($c: ID!, $a: String!) {{ messages(conversationId: $c, first: 200, after: $a) {{ nodes {{ {FIELDS} }} }} }}"
)
SYNC = f"""
query($cursors: [SyncCursor!]!) {{
  sync(cursors: $cursors, limit: 200) {{
    lastSeq lastChangeSeq changesHaveMore changesTooLong messages {{ {FIELDS} }}
    changes {{ changeSeq kind seq message {{ {FIELDS} }} }}
  }}
}}
"""
CONVERSATION = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq } }"
EMOJIS = ["👍", "🎉", "❤️"]


async def history(api: ChatApi, user: int, cid: str) -> dict[int, dict]:
    nodes = (await api.data(PAGE, {"c": cid, "a": "0"}, user=user))["messages"]["nodes"]
    return {n["seq"]: n for n in nodes}


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_an_offline_client_converges_to_the_server_through_sync_with_its_change_cursor(api, seed):
    rng = random.Random(seed)
    users = [1, 2, 3]
    cid = await api.create_group(1, [2, 3])
    senders: dict[int, int] = {}
    for i in range(8):
        user = rng.choice(users)
        senders[await api.send(user, cid, f"m{i}")] = user
    # the client (user 3) goes offline holding everything so far and both cursors
    held = await history(api, 3, cid)
    conv = (await api.data(CONVERSATION, {"c": cid}, user=3))["conversation"]
    after_seq, after_change = conv["lastSeq"], conv["lastChangeSeq"]
    deleted: set[int] = set()
    changes = 0
    for step in range(40):
        op = rng.choice(["edit", "delete", "react", "unreact", "send"])
        seq = rng.choice(sorted(senders))
        user = rng.choice(users)
        if op == "send":
            senders[await api.send(user, cid, f"late{step}")] = user
            continue
        if seq in deleted:
            continue
        if op == "edit":
            data = await api.data(
                "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) "
                "{ changeSeq } }",
                {"c": cid, "s": seq, "b": f"e{step}"},
                user=senders[seq],
            )
            change = data["editMessage"]["changeSeq"]
        elif op == "delete":
            data = await api.data(
                "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }",
                {"c": cid, "s": seq},
                user=1 if rng.random() < 0.5 else senders[seq],  # the group's owner or the sender
            )
            change = data["deleteMessage"]["changeSeq"]
            deleted.add(seq)
        else:
            mutation = "addReaction" if op == "react" else "removeReaction"
            data = await api.data(
                f"mutation($c: ID!, $s: Long!, $e: String!) {{ {mutation}(conversationId: $c, seq: $s, emoji: $e) "
                "{ changeSeq } }",
                {"c": cid, "s": seq, "e": rng.choice(EMOJIS)},
                user=user,
            )
            change = data[mutation]["changeSeq"]
        if change is not None:
            changes += 1
            assert change == after_change + changes  # gap-free, one per change
    # back online: one sync with both cursors
    (answer,) = (
        await api.data(
            SYNC, {"cursors": [{"conversationId": cid, "afterSeq": after_seq, "afterChangeSeq": after_change}]}, user=3
        )
    )["sync"]
    assert not answer["changesHaveMore"] and not answer["changesTooLong"]
    assert answer["lastSeq"] == len(senders)  # changes took no message seq
    assert [c["changeSeq"] for c in answer["changes"]] == list(range(after_change + 1, after_change + changes + 1))
    client = dict(held)
    for message in answer["messages"]:
        client[message["seq"]] = message
    for change in answer["changes"]:
        client[change["seq"]] = change["message"]
    assert client == await history(api, 3, cid)
