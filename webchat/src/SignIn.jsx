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
    if (!value.trim()) {
      setError(dev ? "Type a user id to sign in as: any id works here, for example 1." : "Paste a token to sign in.");
      return;
    }
    try {
      onToken(dev ? await devSignIn(config.devTokenPath, value.trim()) : value.trim());
    } catch (error) {
      setError(humane(error.message));
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
      {error && (
        <p className="error" role="alert" data-testid="signin-error">
          {error}
        </p>
      )}
    </main>
  );
}

// The sign-in's refusal says what is wrong with the id, not the name of the API's field.
function humane(message) {
  if (!/^userId\b/.test(message)) return message;
  return `This user id cannot sign in: ${message.replace(/^userId\s*/, "it ")}.`;
}
