import { useState } from "react";
import { run } from "./client.js";
import { CREATE_DIRECT, CREATE_GROUP } from "./operations.js";

export function conversationName(conversation, viewerId) {
  if (conversation.type === "GROUP") return conversation.title;
  const other = conversation.members.find((member) => member.userId !== viewerId);
  return `user ${other ? other.userId : viewerId}`;
}

export function Inbox({ client, viewer, inbox, openId, onOpen }) {
  const total = inbox.viewer?.totalUnread ?? 0;
  return (
    <nav className="inbox">
      <div className="total">
        Unread: <span data-testid="total-unread">{total}</span>
        {inbox.viewer?.unreadConversations ? ` in ${inbox.viewer.unreadConversations}` : ""}
      </div>
      <NewConversation client={client} onCreated={(id) => (inbox.reload(), onOpen(id))} />
      {inbox.error && <p className="error">{inbox.error}</p>}
      <ul>
        {inbox.conversations.map((conversation) => (
          <li key={conversation.id}>
            <button
              className={conversation.id === openId ? "open" : ""}
              data-testid="inbox-item"
              data-conversation-id={conversation.id}
              onClick={() => onOpen(conversation.id)}
            >
              <span className="name">{conversationName(conversation, viewer.userId)}</span>
              {conversation.unreadCount > 0 && (
                <span className="badge" data-testid="badge">
                  {conversation.unreadCount}
                </span>
              )}
              <span className="last">{lastLine(conversation.lastMessage)}</span>
            </button>
          </li>
        ))}
      </ul>
    </nav>
  );
}

// One user id: a direct conversation (createDirectConversation is idempotent: both
// people get the same one). Several: a group with a title.
function NewConversation({ client, onCreated }) {
  const [ids, setIds] = useState("");
  const [title, setTitle] = useState("");
  const [error, setError] = useState(null);
  const members = ids.split(/[\s,]+/).filter(Boolean);

  async function submit(event) {
    event.preventDefault();
    setError(null);
    try {
      const data =
        members.length === 1
          ? (await run(client, "mutation", CREATE_DIRECT, { u: members[0] })).createDirectConversation
          : (await run(client, "mutation", CREATE_GROUP, { title: title || "group", members })).createGroup;
      setIds("");
      setTitle("");
      onCreated(data.id);
    } catch (error) {
      setError(error.message);
    }
  }

  return (
    <form className="new" onSubmit={submit}>
      <input name="members" value={ids} onChange={(e) => setIds(e.target.value)} placeholder="user ids: 2 or 2, 3" />
      {members.length > 1 && (
        <input name="title" value={title} onChange={(e) => setTitle(e.target.value)} placeholder="group title" />
      )}
      <button type="submit" disabled={!members.length}>
        Start
      </button>
      {error && <p className="error">{error}</p>}
    </form>
  );
}

function lastLine(message) {
  if (!message) return "no messages yet";
  return message.deletedAt ? "message deleted" : message.body;
}
