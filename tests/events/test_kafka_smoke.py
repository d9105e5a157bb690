import asyncio
import json
import uuid

import websockets

from chatgql.edge.auth import issue_token


async def test_a_message_sent_over_http_arrives_on_a_subscription_through_kafka(kafka_server, http):
    settings = kafka_server.settings
    headers = {"authorization": f"Bearer {issue_token(settings, '1')}"}
    created = await http.post(
        kafka_server.url,
        json={"query": 'mutation { createGroup(title: "k", memberIds: ["2"]) { id } }'},
        headers=headers,
    )
    cid = created.json()["data"]["createGroup"]["id"]
    async with websockets.connect(kafka_server.ws_url, subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(
            json.dumps(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {issue_token(settings, '2')}"}}
            )
        )
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(
            json.dumps(
                {
                    "id": "s",
                    "type": "subscribe",
                    "payload": {"query": "subscription { messageNew { seq message { body } } }"},
                }
            )
        )
        await asyncio.sleep(0.2)
        sent = await http.post(
            kafka_server.url,
            json={
                "query": 'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "via kafka") { message { seq } } }',
                "variables": {"c": cid, "m": str(uuid.uuid4())},
            },
            headers=headers,
        )
        assert sent.json()["data"]["sendMessage"]["message"]["seq"] == 1
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        assert frame["payload"]["data"]["messageNew"] == {"seq": 1, "message": {"body": "via kafka"}}
