// The open conversation, kept in the page's address (#conversation=<id>) so that a
// reload opens it again; replaced, not pushed, so the browser's history stays the page's.
const PREFIX = "#conversation=";

export function openConversationId() {
  return location.hash.startsWith(PREFIX) ? decodeURIComponent(location.hash.slice(PREFIX.length)) || null : null;
}

export function rememberOpenConversation(id) {
  const url = new URL(location.href);
  url.hash = id ? `${PREFIX.slice(1)}${encodeURIComponent(id)}` : "";
  history.replaceState(history.state, "", url.toString());
}
