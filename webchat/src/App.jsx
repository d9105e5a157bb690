import { useEffect, useMemo, useState } from "react";
import { chatClient, run } from "./client.js";
import { Conversation } from "./Conversation.jsx";
import { Inbox } from "./Inbox.jsx";
import { SavedList } from "./Saved.jsx";
import { VIEWER } from "./operations.js";
import { SignIn } from "./SignIn.jsx";
import { MyThreads, ThreadPane } from "./Threads.jsx";
import { saveToken, savedToken } from "./devToken.js";
import { openConversationId, rememberOpenConversation } from "./openConversation.js";
import { useInbox } from "./useInbox.js";

function urls(graphqlPath) {
  const http = new URL(graphqlPath, location.href);
  const ws = new URL(http);
  ws.protocol = http.protocol === "https:" ? "wss:" : "ws:";
  return [http.toString(), ws.toString()];
}

export function App({ config }) {
  const [token, setToken] = useState(savedToken);
  const signIn = (next) => {
    if (!next) rememberOpenConversation(null); // the next person starts at their inbox
    saveToken(next);
    setToken(next);
  };
  if (!token) return <SignIn config={config} onToken={signIn} />;
  return <Chat key={token} config={config} token={token} onSignOut={() => signIn(null)} />;
}

function Chat({ config, token, onSignOut }) {
  const [connection, setConnection] = useState("connecting");
  const { client, ws } = useMemo(() => chatClient(...urls(config.graphqlPath), token, setConnection), [config, token]);
  useEffect(() => () => ws.dispose(), [ws]);
  const [viewer, setViewer] = useState(null);
  const [error, setError] = useState(null);
  // Kept in the page's address (#conversation=<id>): a reload opens it again.
  const [openId, setOpenId] = useState(openConversationId);
  const open = (id) => {
    rememberOpenConversation(id);
    setOpenId(id);
  };

  useEffect(() => {
    run(client, "query", VIEWER, {}).then((data) => setViewer(data.viewer), (error) => setError(error));
  }, [client]);

  if (error) {
    return (
      <main className="signin">
        <p className="error">{error.code === "UNAUTHENTICATED" ? "This token is not accepted: " : ""}{error.message}</p>
        <button onClick={onSignOut}>Sign in again</button>
      </main>
    );
  }
  if (!viewer) return <main className="signin">Signing in…</main>;
  return (
    <ChatLayout
      client={client}
      viewer={viewer}
      config={config}
      connection={connection}
      openId={openId}
      onOpen={open}
      onSignOut={onSignOut}
    />
  );
}

function ChatLayout({ client, viewer, config, connection, openId, onOpen, onSignOut }) {
  const inbox = useInbox(client);
  const total = inbox.viewer?.totalUnread ?? 0;
  useEffect(() => {
    document.title = `${total ? `(${total}) ` : ""}chatgql web chat · user ${viewer.userId}`;
  }, [total, viewer.userId]);
  const open = inbox.conversations.find((conversation) => conversation.id === openId);
  // An open thread (its root's Message id) takes the conversation's pane; its back button returns to it.
  const [threadRootId, setThreadRootId] = useState(null);
  const openThread = (conversationId, rootId) => {
    if (conversationId !== openId) onOpen(conversationId);
    setThreadRootId(rootId);
  };
  const [showSaved, setShowSaved] = useState(false);
  return (
    // On a narrow screen one pane at a time: the inbox, or the open conversation with a back button.
    <div className={`chat ${openId ? "has-open" : ""}`}>
      <aside>
        <header>
          <strong>user {viewer.userId}</strong>
          <span className={`connection ${connection}`} data-testid="connection">
            {connection}
          </span>
          <button className="link" data-testid="show-saved" onClick={() => setShowSaved((shown) => !shown)}>
            saved
          </button>
          <button className="link" onClick={onSignOut}>
            sign out
          </button>
        </header>
        {showSaved && (
          <SavedList client={client} onOpen={(id) => (setThreadRootId(null), onOpen(id))} onClose={() => setShowSaved(false)} />
        )}
        <Inbox
          client={client}
          viewer={viewer}
          config={config}
          inbox={inbox}
          openId={openId}
          onOpen={(id) => (setThreadRootId(null), onOpen(id))}
        />
        <MyThreads client={client} openRootId={threadRootId} onOpenThread={openThread} />
      </aside>
      {openId && threadRootId ? (
        <ThreadPane
          key={threadRootId}
          client={client}
          viewer={viewer}
          rootId={threadRootId}
          onBack={() => setThreadRootId(null)}
        />
      ) : openId ? (
        <Conversation
          key={openId}
          client={client}
          viewer={viewer}
          config={config}
          conversationId={openId}
          conversations={inbox.conversations}
          summary={open}
          onBack={() => onOpen(null)}
          onOpenThread={(rootId) => setThreadRootId(rootId)}
        />
      ) : (
        <section className="empty">Pick a conversation, or start one.</section>
      )}
    </div>
  );
}
