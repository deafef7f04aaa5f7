"""A stand-in embeddings API: a real HTTP server on 127.0.0.1 speaking OpenAI's embeddings wire format.

Used by tests/test_embeddings_api.py instead of monkeypatching localrag's client (like tests/llm_stub.py for chat).
The vectors are a small bag of words hashed into ``dim`` buckets (L2-normalized), so texts sharing words are close
and ingest + search give meaningful rankings.  The test picks the behaviour with ``stub.scenario`` and reads back
``stub.requests``.

Scenarios:

    ok              200 {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}], ...};
                    a request with "dimensions" gets that many when ``honour_dimensions`` is set
    status:NNN      HTTP NNN with an error body that echoes the Authorization header (a leak trap); with a
                    Retry-After header when ``retry_after`` is not None
    fail_first:N    the first N requests get HTTP 503, then ok
    fail_after:N    the first N requests are ok, every later one gets HTTP 400 (count from ``requests.clear()``)
    slow            says nothing until released (or ``delay`` seconds): the client must time out
    reset           closes the connection without answering
    malformed       200 with a body that is not JSON
    error_200       200 {"error": ...} whose message echoes the Authorization header past character 150
    no_data         200 {"object": "list"} without data
    wrong_count     one vector fewer than inputs
    wrong_dim       vectors of 1536 dimensions
    mixed_dims      the first vector one dimension shorter
    nan             a NaN inside the first vector (JSON's non-standard NaN token, as Python emits it)
    inf             an Infinity inside the first vector
    shuffled        the items in reverse order, each with its right index
    no_index        the items in order, without index fields
"""

from __future__ import annotations

import hashlib
import http.server
import json
import math
import re
import threading

from llm_stub import LoopbackStub, StubServer

_WORD_RE = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")


def stub_vector(text: str, dim: int) -> list[float]:
    """Words (and single CJK characters) hashed into dim buckets, L2-normalized; the zero vector for no words."""
    acc = [0.0] * dim
    for word in _WORD_RE.findall(text.lower()):
        acc[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in acc))
    return [x / norm for x in acc] if norm else acc


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "StubServer"

    def log_message(self, format, *args):  # noqa: A002 - keep test output quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status: int, payload, headers: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), headers)

    def do_GET(self) -> None:  # noqa: N802
        with self.server.stub.lock:
            self.server.stub.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": None})
        self._json(404, {"error": {"message": "only POST /embeddings here"}})

    def do_POST(self) -> None:  # noqa: N802
        stub = self.server.stub
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with stub.lock:
            stub.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
            n_request = len(stub.requests)
        try:
            self._answer(stub, body, n_request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeouts)

    def _answer(self, stub: "EmbeddingsStub", body, n_request: int) -> None:
        scenario = stub.scenario
        if not self.path.split("?")[0].endswith("/embeddings"):
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        if scenario.startswith("status:") or (scenario.startswith("fail_first:")
                                              and n_request <= int(scenario.split(":")[1])):
            status = int(scenario.split(":")[1]) if scenario.startswith("status:") else 503
            headers = {} if stub.retry_after is None else {"Retry-After": str(stub.retry_after)}
            leak = f"rejected credentials {self.headers.get('Authorization', '')}"
            return self._json(status, {"error": {"message": leak, "type": "server_error"}}, headers)
        if scenario.startswith("redirect:"):   # the endpoint moved: Location names where
            return self._send(int(scenario.split(":")[1]), b"", {"Location": "https://other.invalid/v1/embeddings"})
        if scenario.startswith("fail_after:") and n_request > int(scenario.split(":")[1]):
            return self._json(400, {"error": {"message": "rejected", "type": "invalid_request_error"}})
        if scenario == "slow":
            stub.release.wait(stub.delay)
        if scenario == "reset":
            self.close_connection = True
            return  # no status line: the client sees the connection closed
        if scenario == "malformed":
            return self._send(200, b"<html>502 Bad Gateway</html>")
        if scenario == "error_200":   # a gateway's error with status 200, echoing the key
            leak = f"invalid api key {self.headers.get('Authorization', '')}"
            return self._json(200, {"error": {"message": "x" * 150 + " " + leak, "type": "invalid_request_error"}})
        if scenario == "no_data":
            return self._json(200, {"object": "list", "model": "stub"})
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dim = stub.dim
        if stub.honour_dimensions and isinstance(body.get("dimensions"), int):
            dim = body["dimensions"]
        if scenario == "wrong_dim":
            dim = 1536
        vectors = [stub_vector(t, dim) for t in texts]
        if scenario == "mixed_dims":
            vectors[0] = vectors[0][:-1]
        if scenario == "nan":
            vectors[0][0] = float("nan")
        if scenario == "inf":
            vectors[0][0] = float("inf")
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        if scenario == "wrong_count":
            data = data[:-1]
        if scenario == "shuffled":
            data.reverse()
        if scenario == "no_index":
            for item in data:
                del item["index"]
        self._json(200, {"object": "list", "data": data, "model": body.get("model"),
                         "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}})


class EmbeddingsStub(LoopbackStub):
    """The server, its behaviour knobs and what it received."""

    def __init__(self, dim: int = 384) -> None:
        super().__init__(_Handler, "embeddings-stub")
        self.scenario = "ok"
        self.dim = dim
        self.honour_dimensions = False
        self.retry_after: str | int | None = 0   # 0: retry at once (keeps tests fast); None: no header
        self.delay = 5.0
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def inputs(self) -> list[str]:
        """Every text the server was asked to embed, in request order."""
        return [t for r in self.requests for t in (r["body"] or {}).get("input", [])]

