"""Attachments: validated metadata on a message (the bytes live in the client's storage), written in the
send's transaction, erased by a delete; bad or too many attachments are coded errors that write nothing."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from ..conftest import error_code

SEND = """
mutation($c: ID!, $m: UUID!, $a: [AttachmentInput!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "look", attachments: $a) {
    duplicate message { seq attachments { url mimeType name sizeBytes width height } }
  }
}
"""
PHOTO = {"url": "https://files.example/p.png", "mimeType": "image/PNG", "name": "p.png", "sizeBytes": 1234,
         "width": 640, "height": 480}  # fmt: skip
DOC = {"url": "https://files.example/d.pdf", "mimeType": "application/pdf", "name": "d.pdf", "sizeBytes": 99}


async def test_attachments_are_stored_in_order_read_back_and_a_retry_stores_them_once(api, engine):
    cid = await api.create_group(1, [2])
    cmid = str(uuid.uuid4())
    sent = (await api.data(SEND, {"c": cid, "m": cmid, "a": [PHOTO, DOC]}, user=1))["sendMessage"]
    expected = [{**PHOTO, "mimeType": "image/png"}, {**DOC, "width": None, "height": None}]
    assert sent["message"]["attachments"] == expected
    again = (await api.data(SEND, {"c": cid, "m": cmid, "a": [PHOTO, DOC]}, user=1))["sendMessage"]
    assert again["duplicate"] is True
    read = await api.data(
        "query($c: ID!) { messages(conversationId: $c) { nodes { attachments { url mimeType } } } }", {"c": cid}, user=2
    )
    assert [a["url"] for a in read["messages"]["nodes"][0]["attachments"]] == [PHOTO["url"], DOC["url"]]
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM message_attachment"))).scalar() == 2
    await api.data("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 1) { changeSeq } }", {"c": cid}, user=1)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM message_attachment"))).scalar() == 0  # erased


@pytest.mark.parametrize(
    "bad",
    [
        {**DOC, "url": "ftp://x/y"},
        {**DOC, "url": "https://x/" + "a" * 2048},
        {**DOC, "mimeType": "pdf"},
        {**DOC, "name": " "},
        {**DOC, "sizeBytes": -1},
        {**DOC, "sizeBytes": 10**12},
        {**DOC, "width": 0},
    ],
)
async def test_invalid_attachment_metadata_is_bad_user_input_and_writes_nothing(api, engine, bad):
    cid = await api.create_group(1, [2])
    error = await api.error(SEND, {"c": cid, "m": str(uuid.uuid4()), "a": [bad]}, user=1)
    assert error_code(error) == "BAD_USER_INPUT"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM message"))).scalar() == 0


async def test_an_oversized_attachment_list_is_a_coded_error(api, server):
    cid = await api.create_group(1, [2])
    many = [DOC] * (server.settings.max_attachments + 1)
    error = await api.error(SEND, {"c": cid, "m": str(uuid.uuid4()), "a": many}, user=1)
    assert error_code(error) == "BAD_USER_INPUT" and error["extensions"]["reason"] == "TOO_MANY_ATTACHMENTS"
