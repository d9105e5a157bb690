// One live subscription that survives dropped connections: when it ends (the socket
// closed, the network went away, or the server asked for a resync), it starts again
// after a short back-off with the variables of *that* moment (variables() is called
// each time), so a resumable subscription resumes from the cursors the view holds.
const BACKOFF_MS = [250, 500, 1000, 2000, 4000];

export function live(client, document, variables, onData, { onRestart } = {}) {
  let stopped = false;
  let failures = 0;
  let timer = null;
  let subscription = null;

  function start(restart) {
    if (stopped) return;
    if (restart) onRestart?.(restart);
    subscription = client.subscription(document, variables()).subscribe((result) => {
      if (result.error) {
        subscription?.unsubscribe();
        const graphQLError = result.error.graphQLErrors[0];
        const reason = graphQLError?.extensions?.reason ?? "DISCONNECTED";
        timer = setTimeout(() => start({ reason }), BACKOFF_MS[Math.min(failures++, BACKOFF_MS.length - 1)]);
        return;
      }
      failures = 0;
      onData(result.data);
    });
  }

  start(null);
  return () => {
    stopped = true;
    clearTimeout(timer);
    subscription?.unsubscribe();
  };
}
