// The development sign-in: POST /dev/token {"userId"} -> {"token"}. chatgql serves it
// only in development; anywhere else a person pastes a token (`chatgql token <id>`).
export async function devSignIn(devTokenPath, userId) {
  const response = await fetch(devTokenPath, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ userId }),
  }).catch(() => {
    throw new Error("The server could not be reached: try again.");
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.errors?.[0]?.message ?? `sign-in refused (HTTP ${response.status})`);
  return body.token;
}

const KEY = "chatgql-demo-token";
export const savedToken = () => sessionStorage.getItem(KEY);
export const saveToken = (token) => (token ? sessionStorage.setItem(KEY, token) : sessionStorage.removeItem(KEY));
