"""A bystander in its own process (run as a script; RemoteBystander in test_websocket_floods.py).

Asks a small authenticated query and /healthz in a loop and appends one line per
round to a file: the round's latency in seconds, and "ok" or what went wrong. Its
own process, so that neither the attacker's loop nor the test process's collector
sits between it and the server: what it measures is the server.

    python remote_bystander.py GRAPHQL_URL HEALTHZ_URL TOKEN OUT_FILE
"""

from __future__ import annotations

import sys
import time

import httpx

QUERY = "{ viewer { totalUnread } }"


def main() -> None:
    url, healthz, token, out = sys.argv[1:5]
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    with httpx.Client(timeout=30) as http, open(out, "a", buffering=1) as lines:
        while True:
            started = time.perf_counter()
            try:
                response = http.post(url, json={"query": QUERY}, headers=headers)
                health = http.get(healthz)
                ok = response.status_code == 200 and "errors" not in response.json() and health.status_code == 200
                outcome = "ok" if ok else f"{response.status_code} {response.text[:100]!r}"
            except httpx.HTTPError as error:
                outcome = repr(error)[:200]
            lines.write(f"{time.perf_counter() - started:.6f} {outcome}\n")
            time.sleep(0.01)


if __name__ == "__main__":
    main()
