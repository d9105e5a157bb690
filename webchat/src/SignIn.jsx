import { useState } from "react";
import { devSignIn } from "./devToken.js";

// Development: pick a user id, the server mints a token. Elsewhere: paste a token.
export function SignIn({ config, onToken }) {
  const [value, setValue] = useState("");
  const [error, setError] = useState(null);
  const dev = Boolean(config.devTokenPath);

  async function submit(event) {
    event.preventDefault();
    setError(null);
    try {
      onToken(dev ? await devSignIn(config.devTokenPath, value.trim()) : value.trim());
    } catch (error) {
      setError(error.message);
    }
  }

  return (
    <main className="signin">
      <h1>chatgql web chat</h1>
      <form onSubmit={submit}>
        {dev ? (
          <label>
            Development sign-in: your user id{" "}
            <input name="userId" value={value} onChange={(e) => setValue(e.target.value)} placeholder="1" autoFocus />
          </label>
        ) : (
          <label>
            A token (<code>chatgql token &lt;user id&gt;</code>){" "}
            <input name="token" value={value} onChange={(e) => setValue(e.target.value)} autoFocus />
          </label>
        )}
        <button type="submit">Sign in</button>
      </form>
      {dev && <p className="hint">Any user id works: development tokens are signed with the development secret.</p>}
      {error && <p className="error">{error}</p>}
    </main>
  );
}
