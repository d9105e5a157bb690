async def test_viewer_answers_with_the_token_user(client):
    data = await client.data("{ viewer { userId totalUnread unreadConversations } }", user=7)
    assert data == {"viewer": {"userId": "7", "totalUnread": 0, "unreadConversations": 0}}
