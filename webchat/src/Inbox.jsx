import { useState } from "react";
import { run } from "./client.js";
import { CREATE_DIRECT, CREATE_GROUP } from "./operations.js";

export function conversationName(conversation, viewerId) {
  if (conversation.type === "GROUP") return conversation.title;
  const other = conversation.members.find((member) => member.userId !== viewerId);
  return `user ${other ? other.userId : viewerId}`;
}

export function Inbox({ client, viewer, config, inbox, openId, onOpen }) {
  const total = inbox.viewer?.totalUnread ?? 0;
  return (
    <nav className="inbox">
      <div className="total">
        Unread: <span data-testid="total-unread">{total}</span>
        {inbox.viewer?.unreadConversations ? ` in ${inbox.viewer.unreadConversations}` : ""}
      </div>
      <NewConversation
        client={client}
        viewer={viewer}
        maxTitleChars={config.maxTitleChars}
        onCreated={(id) => (inbox.reload(), onOpen(id))}
      />
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
              <span className="name" title={conversationName(conversation, viewer.userId)}>
                {conversationName(conversation, viewer.userId)}
              </span>
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

// What the user ids box holds: ids separated by commas. The chat calls people "user 2",
// so a leading "user " is dropped; an id with a space left in it is a mistake the person
// is told about ("2 3" is two ids without their comma), never two people they did not mean.
export function parseMemberIds(text, viewerId) {
  const ids = [];
  for (const part of text.split(/[,;\n]/)) {
    const id = part.trim().replace(/^users?\s+/i, "");
    if (!id) continue;
    if (/\s/.test(id)) {
      const suggestion = id.split(/\s+/).join(", ");
      return { ids: [], problem: `“${part.trim()}” is not one user id: separate user ids with commas (${suggestion})` };
    }
    if (id !== viewerId && !ids.includes(id)) ids.push(id);
  }
  if (!ids.length && text.trim()) return { ids, problem: "that is you: type the id of someone else" };
  return { ids, problem: null };
}

// One user id: a direct conversation (createDirectConversation is idempotent: both
// people get the same one). Several: a group with a title.
function NewConversation({ client, viewer, maxTitleChars, onCreated }) {
  const [ids, setIds] = useState("");
  const [title, setTitle] = useState("");
  const [error, setError] = useState(null);
  const { ids: members, problem } = parseMemberIds(ids, viewer.userId);
  const titleTooLong = maxTitleChars && [...title].length > maxTitleChars;

  async function submit(event) {
    event.preventDefault();
    setError(null);
    if (problem || !members.length || titleTooLong) return;
    try {
      const data =
        members.length === 1
          ? (await run(client, "mutation", CREATE_DIRECT, { u: members[0] })).createDirectConversation
          : (await run(client, "mutation", CREATE_GROUP, { title: title.trim() || "group", members })).createGroup;
      setIds("");
      setTitle("");
      onCreated(data.id);
    } catch (error) {
      setError(error.message);
    }
  }

  return (
    <form className="new" onSubmit={submit}>
      <input
        name="members"
        value={ids}
        onChange={(e) => setIds(e.target.value)}
        placeholder="user ids: 2 or 2, 3"
        aria-label="User ids to start a conversation with, separated by commas"
        aria-invalid={Boolean(problem)}
        aria-describedby="members-help"
        autoComplete="off"
      />
      {members.length > 1 && (
        <input
          name="title"
          value={title}
          onChange={(e) => setTitle(e.target.value)}
          placeholder="group title"
          aria-label="Group title"
          aria-invalid={Boolean(titleTooLong)}
        />
      )}
      <button type="submit" disabled={!members.length || Boolean(problem) || Boolean(titleTooLong)}>
        Start
      </button>
      <p className={problem || titleTooLong ? "error" : "hint"} id="members-help" data-testid="members-help" aria-live="polite">
        {problem ??
          (titleTooLong
            ? `a group title holds at most ${maxTitleChars} characters`
            : members.length === 1
              ? `a direct conversation with user ${members[0]}`
              : members.length > 1
                ? `a group with users ${members.join(", ")} and you`
                : "")}
      </p>
      {error && <p className="error">{error}</p>}
    </form>
  );
}

function lastLine(message) {
  if (!message) return "no messages yet";
  return message.deletedAt ? "message deleted" : message.body;
}
