import { useCallback, useEffect, useState } from "react";
import { run } from "./client.js";
import { live } from "./live.js";
import { SAVED, SAVED_CHANGED, UNSAVE } from "./operations.js";

// The viewer's saved messages, newest save first: read again whenever a save or an unsave comes
// from any of their devices (savedMessageChanged), each with a way to open its conversation or unsave it.
export function SavedList({ client, onOpen, onClose }) {
  const [saved, setSaved] = useState(null);
  const [error, setError] = useState(null);
  const load = useCallback(
    () =>
      run(client, "query", SAVED, { after: null }).then(
        (data) => (setSaved(data.savedMessages.nodes), setError(null)),
        (failure) => setError(failure.message),
      ),
    [client],
  );
  useEffect(() => {
    load();
    return live(client, SAVED_CHANGED, () => ({}), () => load(), { onRestart: () => load() });
  }, [client, load]);
  const unsave = (item) =>
    run(client, "mutation", UNSAVE, { c: item.conversationId, s: item.seq }).then(load, (failure) =>
      setError(failure.message),
    );
  return (
    <section className="saved" data-testid="saved">
      <header>
        <strong>Saved messages</strong>
        <button className="link" onClick={onClose}>
          close
        </button>
      </header>
      {error && <p className="error">{error}</p>}
      {saved && !saved.length && <p className="loading">Nothing saved yet.</p>}
      <ol>
        {(saved ?? []).map((item) => (
          <li key={`${item.conversationId}:${item.seq}`} data-testid="saved-message">
            <span className="sender">user {item.message.senderId}</span>{" "}
            <button className="link body" onClick={() => onOpen(item.conversationId)}>
              {item.message.body}
            </button>{" "}
            <button className="link" data-testid="unsave" onClick={() => unsave(item)}>
              unsave
            </button>
          </li>
        ))}
      </ol>
    </section>
  );
}
