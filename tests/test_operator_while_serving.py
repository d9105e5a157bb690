"""The operator's commands beside a running `chatgql serve`: erase-user and the dead-letter CLI.

A real `chatgql serve` (the default: one worker per core but one) on the embedded
default (its data directory, no CHATGQL_DATABASE_URL) and on an external PostgreSQL; clients
send over HTTP while `chatgql erase-user` runs as a process of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import asyncpg
import httpx
import pytest

from chatgql import db
from chatgql.db import datadir
from chatgql.edge.auth import issue_token
from chatgql.settings import load_settings

from .conftest import drop_database, free_port, scratch_database

SECRET = "an-operator-test-secret-0123456789abcdef-0123456789"
VICTIM = "victim"
OTHERS = ("u1", "u2", "u3", "u4")
GROUP_MESSAGES, DIRECT_MESSAGES = 300, 40  # the victim's, before the erase
BATCH = 25  # the erase's --batch: many short transactions
SEND = """mutation($c: ID!, $m: UUID!, $b: String!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } }
}"""


class _Refusing(BaseHTTPRequestHandler):
    """A webhook endpoint that answers every delivery 500: each event becomes a dead letter."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Serve:
    """`chatgql serve` in a process of its own, and the environment its operator's commands share."""

    cwd: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    def start(self) -> None:
        log = (self.cwd / "serve.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chatgql.server.cli", "serve", "--port", str(self.port)],
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return (self.cwd / "serve.log").read_text()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def healthy(self, http: httpx.AsyncClient, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.alive(), self.log()
            try:
                if (await http.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"chatgql serve not healthy after {timeout} s:\n{self.log()}")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"chatgql serve did not stop on SIGINT:\n{self.log()}") from None

    async def cli(self, *args: str, on_line: list[tuple[float, str]] | None = None) -> tuple[int, str, str]:
        """`chatgql ARGS` beside the server, in a process of its own: (exit code, stdout, stderr);
        each stdout line is also appended to on_line with when it came."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "chatgql.server.cli",
            *args,
            cwd=self.cwd,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        lines: list[str] = []

        async def read_out() -> None:
            async for raw in process.stdout:
                line = raw.decode()
                lines.append(line)
                if on_line is not None:
                    on_line.append((time.monotonic(), line.rstrip("\n")))

        _, err = await asyncio.wait_for(asyncio.gather(read_out(), process.stderr.read()), 180)
        return await process.wait(), "".join(lines), err.decode()


def _environment(**chatgql: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CHATGQL_")}
    env.update({f"CHATGQL_{k.upper()}": v for k, v in chatgql.items()})
    return env


def _common(webhook_url: str) -> dict[str, str]:
    return dict(
        jwt_secret=SECRET,
        access_log="false",
        rate_send_per_second="10000",
        rate_send_burst="10000",
        webhook_url=webhook_url,
        webhook_secret="whsec_" + base64.b64encode(b"k" * 32).decode(),
        webhook_allow_private="true",
        webhook_max_attempts="1",
    )


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Not under pytest's tmp_path: as root, the embedded PostgreSQL runs as a user of its own,
    and another pytest session makes /tmp/pytest-of-root private again whenever it starts."""
    path = Path(tempfile.mkdtemp(prefix="chatgql-operator-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def embedded_serve(workdir: Path, refusing_endpoint: str) -> AsyncIterator[Serve]:
    env = _environment(data_dir=str(workdir / "data"), **_common(refusing_endpoint))
    env.pop("XDG_RUNTIME_DIR", None)  # as from a shell
    serve = Serve(workdir, env)
    serve.start()
    try:
        yield serve
    finally:
        assert serve.stop() == 0, serve.log()


@pytest.fixture
async def external_serve(workdir: Path, database_url: str, refusing_endpoint: str) -> AsyncIterator[Serve]:
    url = await scratch_database(database_url, "chatgql_operator")
    serve = Serve(workdir, _environment(database_url=url, **_common(refusing_endpoint)))
    serve.start()
    try:
        yield serve
    finally:
        try:
            assert serve.stop() == 0, serve.log()
        finally:
            await drop_database(database_url, "chatgql_operator")


class Api:
    def __init__(self, http: httpx.AsyncClient, serve: Serve) -> None:
        self._http = http
        self._url = serve.url
        settings = load_settings(jwt_secret=SECRET)
        self._tokens = {user: issue_token(settings, user) for user in (VICTIM, *OTHERS)}

    async def call(self, user: str, query: str, **variables: object) -> dict:
        response = await self._http.post(
            self._url,
            json={"query": query, "variables": variables},
            headers={"authorization": f"Bearer {self._tokens[user]}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        document = response.json()
        assert "errors" not in document, document
        return document["data"]

    async def send(self, user: str, conversation_id: str, body: str, client_msg_id: str | None = None) -> int:
        data = await self.call(user, SEND, c=conversation_id, m=client_msg_id or str(uuid.uuid4()), b=body)
        return data["sendMessage"]["message"]["seq"]


@dataclass
class Senders:
    """The other users sending to the group (and u1 to the direct conversation) until told to stop."""

    api: Api
    group: str
    acked: dict[str, tuple[str, int]] = field(default_factory=dict)  # clientMsgId -> (conversation, seq)
    errors: list[BaseException] = field(default_factory=list)
    sent_at: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds) of each send
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, user: str) -> None:
        n = 0
        while not self.stop.is_set():
            client_msg_id = str(uuid.uuid4())
            n += 1
            started = time.monotonic()
            try:
                seq = await self.api.send(user, self.group, f"{user} says {n}", client_msg_id)
            except Exception as error:  # every one counts against the test
                self.errors.append(error)
                return
            self.sent_at.append((started, time.monotonic() - started))
            self.acked[client_msg_id] = (self.group, seq)

    async def until(self, count: int) -> None:
        while len(self.acked) < count:
            assert not self.errors, self.errors
            await asyncio.sleep(0.01)


async def _conversations(api: Api) -> tuple[str, str]:
    group = await api.call(
        "u1",
        'mutation($m: [ID!]!) { createGroup(title: "ops", memberIds: $m) { id } }',
        m=[VICTIM, *OTHERS[1:]],
    )
    direct = await api.call(VICTIM, 'mutation { createDirectConversation(userId: "u1") { id } }')
    return group["createGroup"]["id"], direct["createDirectConversation"]["id"]


async def _victim_sends(api: Api, conversation_id: str, count: int) -> None:
    async def some(start: int) -> None:
        for i in range(start, count, 4):
            await api.send(VICTIM, conversation_id, f"secret {i} of the victim")

    await asyncio.gather(*(some(start) for start in range(4)))


async def _erase_while_sending(serve: Serve, database_url_of: str | None) -> None:
    async with httpx.AsyncClient() as http:
        await serve.healthy(http)
        api = Api(http, serve)
        group, direct = await _conversations(api)
        await _victim_sends(api, group, GROUP_MESSAGES)
        await _victim_sends(api, direct, DIRECT_MESSAGES)

        senders = Senders(api, group)
        tasks = [asyncio.create_task(senders.run(user)) for user in OTHERS for _ in range(2)]
        try:
            await senders.until(20)
            batches: list[tuple[float, str]] = []
            started = time.monotonic()
            code, out, err = await serve.cli("erase-user", VICTIM, "--batch", str(BATCH), on_line=batches)
            finished = time.monotonic()
            assert code == 0, (out, err)
            await senders.until(len(senders.acked) + 20)  # the server goes on serving after it
        finally:
            senders.stop.set()
            await asyncio.gather(*tasks)
        assert not senders.errors, senders.errors
        assert out.splitlines()[-1] == f"erased {GROUP_MESSAGES + DIRECT_MESSAGES} messages of user {VICTIM}", out
        batch_lines = [line for _, line in batches if line.startswith("conversation ")]
        assert len(batch_lines) == -(-GROUP_MESSAGES // BATCH) + -(-DIRECT_MESSAGES // BATCH), out
        first_batch, last_batch = batches[0][0], batches[-1][0]
        during = sorted(seconds for start, seconds in senders.sent_at if first_batch <= start <= last_batch)
        apart = sorted(seconds for start, seconds in senders.sent_at if not started <= start <= finished)
        assert any(started <= start <= finished for start, _ in senders.sent_at), "no send ran while the erase did"
        # the measurement, for the report (-s): sends while the batches ran, and sends with no erase running
        print(
            f"\nerase-user beside serve: {len(batch_lines)} batches of {BATCH} in {last_batch - first_batch:.2f} s"
            f" ({finished - started:.2f} s with the process's start); sends meanwhile: {len(during)},"
            f" slowest {max(during, default=0) * 1000:.0f} ms; sends with no erase: {len(apart)},"
            f" p50 {apart[len(apart) // 2] * 1000:.0f} ms, slowest {apart[-1] * 1000:.0f} ms"
        )

        # a tombstone is what the API shows
        page = await api.call(
            "u2",
            "query($c: ID!) { conversation(id: $c) { messages(first: 5) { edges { node { senderId body deletedAt } } } } }",
            c=group,
        )
        shown = [edge["node"] for edge in page["conversation"]["messages"]["edges"]]
        assert shown and all(m["body"] == "" and m["deletedAt"] for m in shown if m["senderId"] == VICTIM), shown

        await serve.healthy(http, timeout=10)
        assert serve.alive()
        await api.send("u3", group, "still here")

    url = database_url_of or datadir.published(serve.cwd / "data")
    assert url is not None
    conn = await asyncpg.connect(db.dsn(url))
    try:
        left = await conn.fetchval(
            "SELECT count(*) FROM message WHERE sender_id = $1 AND (deleted_at IS NULL OR body <> '')", VICTIM
        )
        assert left == 0
        erased = await conn.fetchval("SELECT count(*) FROM message WHERE sender_id = $1", VICTIM)
        assert erased == GROUP_MESSAGES + DIRECT_MESSAGES
        for conversation_id in (int(group), int(direct)):
            rows = await conn.fetch("SELECT seq FROM message WHERE conversation_id = $1", conversation_id)
            seqs = [row["seq"] for row in rows]
            last_seq = await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", conversation_id)
            assert sorted(seqs) == list(range(1, last_seq + 1))  # gap-free
        rows = await conn.fetch(
            "SELECT client_msg_id::text AS id, conversation_id, seq, body, deleted_at FROM message WHERE sender_id <> $1",
            VICTIM,
        )
        stored = {row["id"]: row for row in rows}
        assert len(stored) == len(rows)  # each once
        for client_msg_id, (conversation_id, seq) in senders.acked.items():
            row = stored[client_msg_id]
            assert (str(row["conversation_id"]), row["seq"]) == (conversation_id, seq)
            assert row["deleted_at"] is None and row["body"], row
        # the erase's message.deleted events went out through the serve's own relay
        changes = await conn.fetchval("SELECT count(*) FROM message_change WHERE reason = 'ERASE'")
        assert changes == GROUP_MESSAGES + DIRECT_MESSAGES
        deadline = time.monotonic() + 60
        while await conn.fetchval("SELECT count(*) FROM outbox"):
            assert time.monotonic() < deadline, "the serve's relay left the erase's events in the outbox"
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def _dead_letters(serve: Serve) -> None:
    """`chatgql webhooks dead` lists the dead letters of the running server's database, and
    `chatgql webhooks replay ID` queues one again."""
    code, out, err = await serve.cli("webhooks", "dead", "--limit", "3")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split("\t")[:3] == ["id", "conversation", "type"], out
    assert len(rows) == 3, out  # every message.new above went dead at its first refusal
    first = rows[0].split("\t")
    assert all(row.split("\t")[2].startswith("message.") for row in rows), rows
    assert first[3].startswith("msg_"), rows
    code, out, err = await serve.cli("webhooks", "replay", first[0])
    assert (code, out.strip()) == (0, "queued again: 1"), err


async def _wait_dead_letters(url: str, count: int) -> None:
    conn = await asyncpg.connect(db.dsn(url))
    try:
        deadline = time.monotonic() + 60
        while await conn.fetchval("SELECT count(*) FROM webhook_dead") < count:
            assert time.monotonic() < deadline, "no dead letters after 60 s"
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def test_erase_user_and_dead_letters_beside_a_running_serve_on_the_embedded_default(embedded_serve: Serve):
    """On the embedded default the operator's commands reach the serve's own PostgreSQL (the URL it
    published in the data directory, readable by its user only) instead of exiting 2."""
    await _erase_while_sending(embedded_serve, None)
    server_file = embedded_serve.cwd / "data" / datadir.SERVER_NAME
    assert server_file.stat().st_mode & 0o777 == 0o600
    assert json.loads(server_file.read_text())["pid"] == embedded_serve.proc.pid
    url = datadir.published(embedded_serve.cwd / "data")
    assert url is not None
    await _wait_dead_letters(url, 3)
    await _dead_letters(embedded_serve)
    code, out, err = await embedded_serve.cli("retention", "run", "--days", "1")  # nothing is that old
    assert code == 0, err
    assert out.startswith("erased 0 messages sent before "), out
    code, _, err = await embedded_serve.cli("migrate")  # at head: nothing to do, and no refusal
    assert code == 0, err
    assert embedded_serve.stop() == 0, embedded_serve.log()
    assert not server_file.exists()  # withdrawn at shutdown


async def test_erase_user_and_dead_letters_beside_a_running_serve_on_an_external_database(external_serve: Serve):
    await _erase_while_sending(external_serve, external_serve.env["CHATGQL_DATABASE_URL"])
    await _wait_dead_letters(external_serve.env["CHATGQL_DATABASE_URL"], 3)
    await _dead_letters(external_serve)


OWNER = """
import sys
from pathlib import Path
from chatgql.db import datadir
data_dir = Path(sys.argv[1])
datadir.acquire(data_dir)
for line in sys.stdin:
    if line.strip() == "publish":
        datadir.publish(data_dir, "postgresql://postgres@/postgres?host=/nowhere")
    elif line.strip() == "release":
        datadir.release(data_dir)
    print("done", flush=True)
"""


def _owner(data_dir: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(data_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    _tell(process, "")  # it holds the directory once it answers
    return process


def _tell(process: subprocess.Popen, command: str) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "done"


def test_a_published_url_counts_while_its_owner_holds_the_data_dir_and_lives(workdir: Path):
    """The URL an owner publishes is taken only from the live process that owns the directory:
    not before it publishes, not after it released the directory (the file is gone), not after it
    was killed (the file stays, naming a pid that is gone). Readable by its user only."""
    data_dir = workdir / "data"
    owner = _owner(data_dir)
    try:
        assert datadir.published(data_dir) is None  # owned, not published yet
        _tell(owner, "publish")
        assert datadir.published(data_dir) == "postgresql://postgres@/postgres?host=/nowhere"
        assert (data_dir / datadir.SERVER_NAME).stat().st_mode & 0o777 == 0o600
        assert [p.name for p in data_dir.iterdir() if p.name.startswith(".")] == []  # no temporary left
        _tell(owner, "release")
        assert not (data_dir / datadir.SERVER_NAME).exists()
        assert datadir.published(data_dir) is None
    finally:
        owner.kill()
        owner.wait()

    killed = _owner(data_dir)
    _tell(killed, "publish")
    killed.kill()
    killed.wait()
    assert (data_dir / datadir.SERVER_NAME).exists()
    assert datadir.published(data_dir) is None


def test_an_operator_command_waits_for_the_owner_to_publish(workdir: Path):
    """While the owner has the directory and has not published yet (its server is starting),
    reach_embedded_postgres waits for it rather than refusing; then it uses the owner's URL and
    starts nothing itself."""
    data_dir = workdir / "data"
    owner = _owner(data_dir)
    try:
        publish_later = threading.Timer(0.5, _tell, (owner, "publish"))
        publish_later.start()
        server, url = db.reach_embedded_postgres(data_dir, timeout=60)
        publish_later.join()
        assert (server, url) == (None, "postgresql://postgres@/postgres?host=/nowhere")
        assert not (data_dir / "pgdata").exists()
    finally:
        owner.kill()
        owner.wait()
    with pytest.raises(datadir.DataDirInUse):  # an owner that never publishes: refused at the timeout
        blocker = _owner(data_dir)
        try:
            db.reach_embedded_postgres(data_dir, timeout=0.3)
        finally:
            blocker.kill()
            blocker.wait()


async def test_an_erase_cut_off_by_the_serve_stopping_exits_1_and_running_it_again_finishes(embedded_serve: Serve):
    """On the embedded default the erase runs on the serve's PostgreSQL, which stops with it: the erase
    then stops too (exit 1, saying so; its open batch rolled back), and run again it finishes."""
    data_dir = embedded_serve.cwd / "data"
    async with httpx.AsyncClient() as http:
        await embedded_serve.healthy(http)
        api = Api(http, embedded_serve)
        group, _ = await _conversations(api)
        await _victim_sends(api, group, 30)
    url = datadir.published(data_dir)
    assert url is not None
    holder, watcher = await asyncpg.connect(db.dsn(url)), await asyncpg.connect(db.dsn(url))
    try:
        held = holder.transaction()
        await held.start()  # the conversation's lock, as a long send would hold it
        await holder.execute("SELECT 1 FROM conversation WHERE id = $1 FOR NO KEY UPDATE", int(group))
        erase = asyncio.create_task(embedded_serve.cli("erase-user", VICTIM, "--batch", "5"))
        deadline = time.monotonic() + 120
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FOR NO KEY%'"
        while not await watcher.fetchval(waiting):  # the erase's first batch waits for that lock
            assert not erase.done(), erase.result()
            assert time.monotonic() < deadline, "the erase never reached the conversation's lock"
            await asyncio.sleep(0.05)
        assert await asyncio.to_thread(embedded_serve.stop) == 0, embedded_serve.log()
        code, out, err = await erase
    finally:
        for conn in (holder, watcher):
            conn.terminate()
    assert code == 1, (out, err)
    assert "chatgql: the database cannot be reached" in err and "run the command again" in err, err
    assert "Traceback" not in err, err
    assert "erased" not in out, out

    embedded_serve.start()
    async with httpx.AsyncClient() as http:
        await embedded_serve.healthy(http)
    code, out, err = await embedded_serve.cli("erase-user", VICTIM, "--batch", "5")
    assert code == 0, err
    assert out.splitlines()[-1] == f"erased 30 messages of user {VICTIM}", out
