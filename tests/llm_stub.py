"""A stand-in OpenAI-compatible provider: a real HTTP server on 127.0.0.1 speaking the Chat Completions wire format.

Used by tests/test_ask.py instead of monkeypatching localrag's client.  One server per test; the test picks the
behaviour by setting ``stub.scenario`` (and ``stub.answer``) and reads back ``stub.requests``.

Scenarios (the same names work for non-streaming and streaming requests unless noted):

    ok              200; the answer text (non-streaming: one JSON body; streaming: SSE deltas + stop + [DONE])
    length          like ok, finish_reason "length"
    content_filter  finish_reason "content_filter" and no content
    refusal         non-streaming: message.refusal set; streaming: delta.refusal pieces, then finish_reason "stop"
    json_for_stream streaming: ignores `stream: true` and answers one JSON body (some llama.cpp / proxy setups)
    long_error_200  200 with {"error": ...} whose message has the key straddling character 200 (a cut splits it)
    long_not_json   200, a body that is not JSON with the key straddling character 80
    tool_calls      the assistant answers with a tool call (finish_reason "tool_calls")
    status:NNN      HTTP NNN with an error body that echoes the Authorization header (a leak trap)
    malformed       200 with Content-Type application/json and a body that is not JSON (echoes the header too)
    error_200       200 with {"error": {...}} whose message echoes the Authorization header
    slow            says nothing until released (or ``delay`` seconds): the client must time out
    slow_body       non-streaming: sends the status line and headers, then stalls before the body
    trickle         the JSON body one byte every 0.1 s (no read stalls; the whole takes long); a streaming
                    request gets it too (a server that ignores `stream: true`)
    stall_stream    streaming: sends headers and one delta, then stalls
    no_done         streaming: deltas, then closes without finish_reason or [DONE]
    slow_stream     streaming: like ok, but waits ``piece_delay`` seconds before each delta (a long answer)
    endless         ignores max_tokens: streaming, 1,000-byte deltas until the client hangs up (or 4 MiB, then
                    stop); non-streaming, one body whose answer is ``huge_bytes`` long
    endless_line    streaming: one `data:` line that never ends (no newline), until the client hangs up

A streaming client that hangs up is seen: ``hung_up`` is set, and ``deltas_sent`` counts the deltas written (the
last ones may sit unread in the socket's buffers).
"""

from __future__ import annotations

import http.server
import json
import threading


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "StubServer"

    def log_message(self, format, *args):  # noqa: A002 - keep test output quiet
        pass

    # --- plumbing ---------------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"))

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.server.stub.sse_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, payload) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode("utf-8"))
        self.wfile.flush()

    def _wait(self) -> None:
        self.server.stub.release.wait(self.server.stub.delay)

    # --- the endpoint -----------------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802
        stub = self.server.stub
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        stub.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers.items()),
                              "body": body})
        try:
            if isinstance(body, dict) and body.get("stream"):
                self._streaming(stub)
            else:
                self._plain(stub)
        except (BrokenPipeError, ConnectionResetError):
            stub.hung_up.set()  # the client gave up (timeouts, a reader gone): nothing more to send

    def do_GET(self) -> None:  # noqa: N802
        self.server.stub.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers.items()),
                                          "body": None})
        self._json(404, {"error": {"message": "only POST /chat/completions here"}})

    def _redirect(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Location", "/moved/v1/chat/completions?token=tok-SENTINEL")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _leak_trap(self) -> str:
        return f"rejected credentials {self.headers.get('Authorization', '')}"

    def _plain(self, stub: "ChatStub") -> None:
        scenario = stub.scenario
        if scenario.startswith("status:"):
            self._json(int(scenario.split(":", 1)[1]), {"error": {"message": self._leak_trap(), "type": "x"}})
        elif scenario.startswith("redirect:"):   # "redirect:301": the endpoint moved (http to https, a new path)
            self._redirect(int(scenario.split(":", 1)[1]))
        elif scenario == "malformed":
            self._send(200, b'{"choices": [ {"message": ' + self._leak_trap().encode())
        elif scenario == "error_200":
            self._json(200, {"error": {"message": self._leak_trap(), "type": "invalid_request_error"}})
        elif scenario == "long_error_200":
            self._json(200, {"error": {"message": "x" * 146 + " " + self._leak_trap() + " rejected"}})
        elif scenario == "long_not_json":
            self._send(200, ("z" * 60 + self.headers.get("Authorization", "")).encode())
        elif scenario == "slow":
            self._wait()
            self._json(200, completion_body(stub.answer, "stop"))
        elif scenario == "slow_body":
            body = json.dumps(completion_body(stub.answer, "stop")).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            self._wait()
            self.wfile.write(body)
        elif scenario == "trickle":   # the body one byte at a time: each read is quick, the whole is not
            body = json.dumps(completion_body(stub.answer, "stop")).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(len(body)):
                if stub.release.is_set():
                    return
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                stub.release.wait(0.1)
        elif scenario == "length":
            self._json(200, completion_body(stub.answer, "length"))
        elif scenario == "endless":
            self._json(200, completion_body("x" * stub.huge_bytes, "stop"))
        elif scenario == "content_filter":
            self._json(200, completion_body(None, "content_filter"))
        elif scenario == "refusal":
            body = completion_body(None, "stop")
            body["choices"][0]["message"]["refusal"] = "I can't help with that."
            self._json(200, body)
        elif scenario == "tool_calls":
            body = completion_body(None, "tool_calls")
            body["choices"][0]["message"]["tool_calls"] = [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]
            self._json(200, body)
        else:
            self._json(200, completion_body(stub.answer, "stop"))

    def _streaming(self, stub: "ChatStub") -> None:
        scenario = stub.scenario
        if scenario.startswith(("status:", "redirect:")) or scenario in ("malformed", "error_200", "long_error_200",
                                                          "long_not_json", "json_for_stream", "trickle"):
            return self._plain(stub)
        if scenario == "slow":
            self._wait()
        self._sse_start()
        pieces = split_pieces(stub.answer)
        if scenario == "stall_stream":
            self._event(chunk_body({"role": "assistant", "content": pieces[0]}, None))
            self._wait()
            return
        if scenario == "tool_calls":
            self._event(chunk_body({"role": "assistant", "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}]},
                None))
            self._event(chunk_body({}, "tool_calls"))
            self._event("[DONE]")
            return
        if scenario == "content_filter":
            self._event(chunk_body({"role": "assistant", "content": ""}, None))
            self._event(chunk_body({}, "content_filter"))
            self._event("[DONE]")
            return
        if scenario == "refusal":   # as OpenAI streams one: refusal deltas, then "stop"
            self._event(chunk_body({"role": "assistant", "content": None, "refusal": ""}, None))
            for piece in split_pieces("I can't help with that."):
                self._event(chunk_body({"refusal": piece}, None))
            self._event(chunk_body({}, "stop"))
            self._event("[DONE]")
            return
        if scenario == "endless":   # "endless": 16 times any cap localrag keeps, then it would stop
            while not stub.release.is_set() and stub.deltas_sent < 4096:
                self._event(chunk_body({"content": "y" * 999 + "\n"}, None))
                stub.deltas_sent += 1
            self._event(chunk_body({}, "stop"))
            self._event("[DONE]")
            return
        if scenario == "endless_line":
            self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
            while not stub.release.is_set():
                self.wfile.write(b"z" * 65536)
            return
        self.wfile.write(b": keep-alive comment\n\n")  # SSE comments must be ignored
        self._event(chunk_body({"role": "assistant", "content": ""}, None))
        for piece in pieces:
            if scenario == "slow_stream":
                stub.release.wait(stub.piece_delay)
            self._event(chunk_body({"content": piece}, None))
            stub.deltas_sent += 1
        if scenario == "no_done":
            return
        self._event(chunk_body({}, "length" if scenario == "length" else "stop"))
        self._event("[DONE]")


def completion_body(content, finish_reason: str) -> dict:
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1700000000, "model": "stub-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunk_body(delta: dict, finish_reason) -> dict:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1700000000, "model": "stub-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def split_pieces(text: str, size: int = 7) -> list[str]:
    """The answer cut into small deltas (so a streaming client really has to join them)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


class StubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    stub: "LoopbackStub"


class LoopbackStub:
    """A stub HTTP server on 127.0.0.1 (a free port) in a daemon thread, its handler reading the stub as
    `self.server.stub`: start()/stop() or a `with` block.  It records requests in `requests`; `release` ends any
    wait a handler is in, and stop() sets it (shared by the chat and the embeddings stubs)."""

    def __init__(self, handler: type, name: str) -> None:
        self.requests: list[dict] = []
        self.release = threading.Event()
        self._server = StubServer(("127.0.0.1", 0), handler)
        self._server.stub = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=name, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ChatStub(LoopbackStub):
    """The server, its behaviour knobs and what it received."""

    def __init__(self) -> None:
        super().__init__(_Handler, "llm-stub")
        self.scenario = "ok"
        self.answer = "The evidence answers it [1]."
        self.delay = 5.0                 # upper bound of a "slow" wait; stop() releases it at once
        self.piece_delay = 0.3           # slow_stream: the wait before each delta
        self.huge_bytes = 300 * 1024     # endless, non-streaming: the answer's length
        self.hung_up = threading.Event()  # a streaming client went away mid-stream
        self.deltas_sent = 0
        self.sse_type = "text/event-stream"   # the Content-Type of a stream (a media type is case-blind)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def closed_port() -> int:
    """A 127.0.0.1 port with nothing listening (bound then released)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
