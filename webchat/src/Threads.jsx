import { useEffect, useState } from "react";
import { run } from "./client.js";
import { live } from "./live.js";
import {
  FOLLOW_THREAD,
  MARK_THREAD_READ,
  MY_THREADS,
  SEND_THREAD_REPLY,
  THREAD,
  THREAD_UPDATED,
  UNFOLLOW_THREAD,
} from "./operations.js";

// Reload whenever a thread changes for the viewer (a reply in one they follow, their own reads and
// follows on any device): the list and a thread are states, read again, never patched.
function useThreadUpdates(client, onUpdate) {
  useEffect(() => live(client, THREAD_UPDATED, () => ({}), (data) => onUpdate(data.threadUpdated)), [client]); // eslint-disable-line react-hooks/exhaustive-deps
}

// "Threads": the threads the viewer follows, newest activity first, each with its unread.
export function MyThreads({ client, openRootId, onOpenThread }) {
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const load = () => run(client, "query", MY_THREADS, {}).then((next) => (setData(next), setError(null)), setError);
  useEffect(() => {
    load();
  }, [client]); // eslint-disable-line react-hooks/exhaustive-deps
  useThreadUpdates(client, load);
  if (!data) return error ? <p className="error">{error.message}</p> : null;
  const threads = data.myThreads.nodes;
  return (
    <section className="threads" data-testid="my-threads">
      <p className="total">
        Threads{" "}
        {data.viewer.threadUnread > 0 && (
          <span className="badge" data-testid="thread-unread">
            {data.viewer.threadUnread}
          </span>
        )}
      </p>
      {!threads.length && <p className="hint">Threads you start, reply in or are mentioned in show here.</p>}
      <ul>
        {threads.map((thread) => (
          <li key={thread.root.id}>
            <button
              className={thread.root.id === openRootId ? "open" : ""}
              data-testid="thread-row"
              onClick={() => onOpenThread(thread.conversationId, thread.root.id)}
            >
              <span className="name">{thread.root.body || "message deleted"}</span>
              {thread.unreadCount > 0 && <span className="badge">{thread.unreadCount}</span>}
              <span className="last">
                {thread.lastReplySeq} {thread.lastReplySeq === 1 ? "reply" : "replies"}
                {thread.lastReply ? ` · user ${thread.lastReply.senderId}: ${thread.lastReply.body}` : ""}
              </span>
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}

// One thread: its root, its replies (tombstones where deleted), reading it as it shows, and a reply box that
// sends to the thread only (the conversation's unread does not count it).
export function ThreadPane({ client, viewer, rootId, onBack }) {
  const [thread, setThread] = useState(null);
  const [error, setError] = useState(null);
  const [draft, setDraft] = useState("");
  const load = () =>
    run(client, "query", THREAD, { r: rootId }).then(
      (data) => {
        setThread(data.thread);
        setError(null);
        if (data.thread.unreadCount > 0) {
          run(client, "mutation", MARK_THREAD_READ, { r: rootId, s: data.thread.lastReplySeq }).catch(setError);
        }
      },
      setError,
    );
  useEffect(() => {
    load();
  }, [client, rootId]); // eslint-disable-line react-hooks/exhaustive-deps
  useThreadUpdates(client, (update) => update.rootId === rootId && update.change === "REPLY" && load());

  async function submit(event) {
    event.preventDefault();
    if (!draft.trim()) return;
    const body = draft;
    setDraft("");
    const variables = { c: thread.conversationId, m: crypto.randomUUID(), b: body, r: rootId };
    await run(client, "mutation", SEND_THREAD_REPLY, variables).then(load, setError);
  }

  async function follow(on) {
    await run(client, "mutation", on ? FOLLOW_THREAD : UNFOLLOW_THREAD, { r: rootId }).then(load, setError);
  }

  const back = (
    <button className="back thread-back" onClick={onBack} aria-label="Back to the conversation" data-testid="thread-back">
      ←
    </button>
  );
  if (!thread) {
    return (
      <section className="conversation thread">
        <header>{back}</header>
        <p className="loading">{error ? error.message : "Loading…"}</p>
      </section>
    );
  }
  const line = (message, replySeq) => (
    <li
      key={message.seq}
      className={`message ${message.senderId === viewer.userId ? "mine" : ""} ${message.deletedAt ? "deleted" : ""}`}
      data-testid="thread-message"
      data-reply-seq={replySeq}
    >
      {message.senderId !== viewer.userId && <span className="sender">user {message.senderId}</span>}
      <span className="body">{message.deletedAt ? "message deleted" : message.body}</span>
    </li>
  );
  return (
    <section className="conversation thread" data-testid="thread" data-root-id={rootId}>
      <header>
        {back}
        <strong className="title">Thread</strong>
        <span className="members">
          {thread.lastReplySeq} {thread.lastReplySeq === 1 ? "reply" : "replies"}
        </span>
        <button className="link" data-testid="follow-thread" onClick={() => follow(!thread.following)}>
          {thread.following ? "unfollow" : "follow"}
        </button>
      </header>
      <ol className="messages">
        {line(thread.root, 0)}
        {thread.replies.map((reply) => line(reply.message, reply.replySeq))}
      </ol>
      {error && <p className="error">{error.message}</p>}
      <form className="composer" onSubmit={submit}>
        <input
          name="threadReply"
          value={draft}
          onChange={(event) => setDraft(event.target.value)}
          placeholder="Reply in thread"
          aria-label="Reply in thread"
          autoComplete="off"
        />
        <button type="submit">Reply</button>
      </form>
    </section>
  );
}
