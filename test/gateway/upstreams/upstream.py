"""A payments upstream for the gateway tests (Python stdlib only).

Every executed POST is a row in its own SQLite database (the side effect the tests count), committed
before the response is written. A request's ``x-fault`` header picks a fault:

- ``sleep=<ms>``: commit, then sleep before answering (past the gateway's timeout);
- ``reset``: commit, then reset the connection without answering;
- ``500``: answer 500 without committing anything;
- ``hang=<ms>``: sleep, then answer 503 without committing anything;
- ``sleep=held`` and ``hang=held``: as above, the sleep lasting until ``POST /release?key=K`` (a test
  observes with ``GET /held?key=K``, which answers ``{"held": n}``, that n requests of key K are being
  held, so they are in flight for as long as it wants).

The ``Idempotency-Key`` header is an RFC 9651 sf-string (``"pay-1"``; a bare ``pay-1`` is taken as is);
rows and ``GET /reconcile?key=K`` use the decoded key, as the gateway's reconcile hook sends it.
``GET /reconcile?key=K`` answers the saved response of key K, or 404 when it never ran.
Usage: ``python3 upstream.py PORT DATABASE``; prints ``ready`` once it listens.
"""
import hashlib
import http.server
import json
import socket
import sqlite3
import struct
import sys
import threading
import time
import urllib.parse

PORT = int(sys.argv[1])
DATABASE = sys.argv[2]
LOCK = threading.Lock()
# Per key: how many requests reached their hold, and the event that ends every hold of that key.
HELD = {}
RELEASES = {}

with sqlite3.connect(DATABASE) as db:
    db.execute("CREATE TABLE IF NOT EXISTS executions (id INTEGER PRIMARY KEY, key TEXT, path TEXT, status INTEGER, body TEXT)")


def idempotency_key(header):
    """The key an ``Idempotency-Key`` header carries: an sf-string's content, or a bare value as is."""
    if len(header) >= 2 and header[0] == '"' and header[-1] == '"':
        return header[1:-1].replace('\\"', '"').replace('\\\\', '\\')
    return header


def release_of(key):
    with LOCK:
        return RELEASES.setdefault(key, threading.Event())


def hold(key):
    """Counts this request as held, then blocks until ``POST /release?key=K``."""
    released = release_of(key)
    with LOCK:
        HELD[key] = HELD.get(key, 0) + 1
    released.wait()


def execute(key, path, status, body):
    with LOCK, sqlite3.connect(DATABASE) as db:
        cursor = db.execute("INSERT INTO executions (key, path, status, body) VALUES (?, ?, ?, ?)", (key, path, status, body))
        return cursor.lastrowid


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, extra=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/healthz":
            return self.answer(200, '{"ok":true}')
        if url.path == "/reconcile":
            key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
            with LOCK, sqlite3.connect(DATABASE) as db:
                row = db.execute("SELECT status, body FROM executions WHERE key = ? ORDER BY id LIMIT 1", (key,)).fetchone()
            if row is None:
                return self.answer(404, '{"found":false}')
            return self.answer(row[0], row[1])
        if url.path == "/held":
            key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
            with LOCK:
                held = HELD.get(key, 0)
            return self.answer(200, json.dumps({"held": held}))
        self.answer(404, '{"error":"not found"}')

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        digest = hashlib.sha256()
        remaining = length
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 16))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
        url = urllib.parse.urlparse(self.path)
        if url.path == "/release":
            release_of(urllib.parse.parse_qs(url.query).get("key", [""])[0]).set()
            return self.answer(200, '{"released":true}')
        key = idempotency_key(self.headers.get("idempotency-key", ""))
        fault = self.headers.get("x-fault", "")
        if fault == "500":
            return self.answer(500, '{"error":"failed before committing"}')
        if fault.startswith("hang="):
            if fault == "hang=held":
                hold(key)
            else:
                time.sleep(int(fault[5:]) / 1000)
            return self.answer(503, '{"error":"gave up before committing"}')
        row = execute(key, self.path, 201, "")
        body = json.dumps({"id": row, "key": key, "path": self.path, "bytes": length, "sha256": digest.hexdigest()}, sort_keys=True)
        with LOCK, sqlite3.connect(DATABASE) as db:
            db.execute("UPDATE executions SET body = ? WHERE id = ?", (body, row))
        if fault == "sleep=held":
            hold(key)
        elif fault.startswith("sleep="):
            time.sleep(int(fault[6:]) / 1000)
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.answer(201, body, [("set-cookie", "session=%s" % row), ("location", "/payments/%s" % row)])


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # A client gone before the answer (the gateway timed out) is one of the faults under test.
        pass


server = Server(("127.0.0.1", PORT), Handler)
print("ready", flush=True)
server.serve_forever()
