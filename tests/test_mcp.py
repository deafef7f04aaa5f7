"""The MCP server (`localrag mcp` on stdio, POST /mcp on `serve`), driven by the official MCP SDK's client.

The server is the real one: a `python -m localrag mcp` subprocess for stdio, the real HTTP server for Streamable
HTTP; the database is the real Postgres from conftest.py with the sample vault ingested.  The SDK client is used in
both eras: protocol 2026-07-28 (mode "auto": server/discover, then per-request _meta) and the initialize handshake
(mode "legacy").  Raw JSON-RPC over the subprocess's pipes covers what a well-behaved client never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

import localrag
from conftest import ROOT, serving

mcp = pytest.importorskip("mcp", reason="the MCP SDK (test extra `mcp`) is not installed")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

RAG_Q = "客户 P1 工单应该怎么升级？"
NOTE = "policies/Support Escalation Policy.md"
TOOLS = {"search", "ask", "get_note", "list_notes", "status", "draft_ticket"}


def stdio_params(env: dict) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "localrag", "mcp"],
                                 env={**os.environ, **env, "PYTHONPATH": str(ROOT)})


async def exercise(target, mode: str) -> dict:
    """initialize/discover, list tools, call each tool, a bad argument, an unknown tool: what came back."""
    out: dict = {}
    async with Client(target, mode=mode) as client:
        out["version"] = client.protocol_version
        out["server"] = client.server_info.name if client.server_info else None
        out["instructions"] = client.instructions
        tools = (await client.list_tools()).tools
        out["tools"] = {t.name: t for t in tools}
        out["search"] = await client.call_tool("search", {"query": RAG_Q, "top_k": 3})
        out["ask"] = await client.call_tool("ask", {"question": RAG_Q})
        out["list_notes"] = await client.call_tool("list_notes", {"prefix": "policies/", "limit": 1})
        out["get_note"] = await client.call_tool("get_note", {"path": NOTE, "heading": "P1 工单升级流程"})
        out["status"] = await client.call_tool("status", {})
        out["bad_arg"] = await client.call_tool("search", {"query": RAG_Q, "top_k": 99})
        out["bad_type"] = await client.call_tool("ask", {"question": 42})
        out["missing_note"] = await client.call_tool("get_note", {"path": "../etc/passwd"})
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {})
        out["unknown_tool"] = info.value
    return out


def check_session(out: dict, version: str) -> None:
    assert out["version"] == version
    assert out["server"] == "localrag"
    assert "no_answer" in (out["instructions"] or "")
    # the instructions name every tool, draft_ticket included (it had been left out)
    assert all(f"`{name}`" in out["instructions"] for name in localrag._mcp_tools()), out["instructions"]
    assert set(out["tools"]) == TOOLS
    for tool in out["tools"].values():
        schema = tool.input_schema
        assert schema["type"] == "object" and tool.description and len(tool.description) > 80
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
    assert out["tools"]["search"].input_schema["required"] == ["query"]
    assert out["tools"]["search"].input_schema["properties"]["top_k"]["maximum"] == localrag.TOP_K_MAX
    assert out["tools"]["ask"].input_schema["properties"]["fallback"]["type"] == ["boolean", "null"]
    search = out["search"]
    assert not search.is_error
    assert len(search.structured_content["results"]) == 3  # top_k=3 and the sample vault has more matches
    assert json.loads(search.content[0].text) == search.structured_content
    first = search.structured_content["results"][0]
    assert first["line_start"] >= 1 and first["line_end"] >= first["line_start"]
    answer = out["ask"].structured_content
    assert answer["mode"] == "rag" and answer["answer"] and answer["reason"]
    cited = answer["citations"][0]
    assert cited["heading_path"] and cited["content"] and cited["line_start"] >= 1
    notes = out["list_notes"].structured_content
    assert notes["total"] == 2 and len(notes["notes"]) == 1 and all(n["path"].startswith("policies/") for n in notes["notes"])
    assert notes["next_offset"] == 1
    note = out["get_note"].structured_content
    assert note["path"] == NOTE and note["heading_path"][-1] == "P1 工单升级流程"
    assert note["content"].startswith("## P1 工单升级流程")
    assert out["status"].structured_content["checks"]["retrieval_ready"] == "ok"
    for key, field in (("bad_arg", "top_k"), ("bad_type", "question"), ("missing_note", "path")):
        result = out[key]
        assert result.is_error, key
        err = result.structured_content["error"]
        assert err["code"] == "invalid_request" and err["details"]["field"] == field, err
        assert result.content[0].text.startswith("error [invalid_request]")
    assert out["unknown_tool"].code == -32602 and "no_such_tool" in str(out["unknown_tool"])


@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_sdk_client_over_stdio(ingested, env, mode, version):
    check_session(asyncio.run(exercise(stdio_params(env), mode)), version)


@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_sdk_client_over_http(ingested, mode, version):
    config, _, _ = ingested
    with serving(config) as url:
        check_session(asyncio.run(exercise(url + "/mcp", mode)), version)


def test_http_mcp_needs_the_token_when_one_is_set(ingested, monkeypatch):
    monkeypatch.setenv("LOCALRAG_API_TOKEN", "mcp-token-1234")
    config = localrag.load_config()

    async def go(headers):
        async with Client(localrag_mcp_transport(url + "/mcp", headers)) as client:
            return (await client.call_tool("search", {"query": RAG_Q})).structured_content

    with serving(config) as url:
        assert asyncio.run(go({"Authorization": "Bearer mcp-token-1234"}))["results"]
        # the SDK reads the JSON-RPC error of a 401 (localrag's REST shape gave "Server returned an error response")
        with pytest.raises(Exception) as info:
            asyncio.run(go({}))
        leaves = [info.value]
        while any(isinstance(e, BaseExceptionGroup) for e in leaves):   # the SDK's task group wraps it
            leaves = [x for e in leaves for x in (e.exceptions if isinstance(e, BaseExceptionGroup) else [e])]
        assert any(isinstance(e, MCPError) and "missing or wrong bearer token" in str(e) for e in leaves), leaves
        status, headers, body = post_raw(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        # refused before its body was read: no id to answer (the SDK puts its own in), localrag's code in data
        assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "missing or wrong bearer token; send Authorization: Bearer <LOCALRAG_API_TOKEN>",
            "data": {"code": "unauthorized", "details": {}}}}


def test_http_mcp_body_refusals_are_jsonrpc_errors(ingested, monkeypatch):
    """413 (over LOCALRAG_MAX_BODY_BYTES) and 411 (a chunked body) on /mcp came in localrag's REST shape; they are
    JSON-RPC error responses now, the status kept (the transport allows a JSON-RPC error at any status)."""
    import http.client
    monkeypatch.setenv("LOCALRAG_MAX_BODY_BYTES", "2048")
    config = localrag.load_config()
    with serving(config) as url:
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                         "params": {"name": "search", "arguments": {"query": "x" * 3000}}})
        reply = json.loads(body)
        assert status == 413 and reply["jsonrpc"] == "2.0" and reply["id"] is None, reply
        assert reply["error"]["code"] == -32600 and "LOCALRAG_MAX_BODY_BYTES" in reply["error"]["message"], reply
        assert reply["error"]["data"] == {"code": "payload_too_large", "details": {"limit": 2048}}, reply
        port = int(url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.putrequest("POST", "/mcp")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        conn.send(b"2\r\n{}\r\n0\r\n\r\n")
        resp = conn.getresponse()
        reply = json.loads(resp.read())
        conn.close()
        assert resp.status == 411 and reply["error"]["data"]["code"] == "length_required", reply
        assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == -32600, reply
        # the REST routes keep their own shape
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/search", json.dumps({"query": "x" * 3000}), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 413 and json.loads(resp.read())["error"]["code"] == "payload_too_large"
        conn.close()


def localrag_mcp_transport(url: str, headers: dict):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=30))


def post_raw(url: str, body, headers: dict | None = None) -> tuple[int, dict, bytes]:
    import http.client
    import urllib.parse
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", "/mcp", data, {"Content-Type": "application/json",
                                        "Accept": "application/json, text/event-stream", **(headers or {})})
    resp = conn.getresponse()
    out = resp.status, dict(resp.headers), resp.read()
    conn.close()
    return out


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def test_http_transport_rules(ingested):
    """Status codes and header validation of the 2026-07-28 Streamable HTTP transport, and the legacy shape."""
    config, _, _ = ingested
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "status", "arguments": {}, "_meta": MODERN_META}}
    good = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "status"}
    with serving(config) as url:
        status, _, body = post_raw(url, call, good)
        assert status == 200 and json.loads(body)["result"]["resultType"] == "complete"
        status, _, body = post_raw(url, call, {**good, "Mcp-Name": "=?base64?c3RhdHVz?="})  # "status", encoded
        assert status == 200, body
        for bad in ({**good, "Mcp-Name": "search"}, {k: v for k, v in good.items() if k != "Mcp-Method"},
                    {**good, "MCP-Protocol-Version": "2025-11-25"}):
            status, _, body = post_raw(url, call, bad)
            assert status == 400 and json.loads(body)["error"]["code"] == -32020, body
        status, _, body = post_raw(url, {**call, "method": "frobnicate"}, {**good, "Mcp-Method": "frobnicate"})
        assert status == 404 and json.loads(body)["error"]["code"] == -32601
        old = {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "1999-01-01"}
        status, _, body = post_raw(url, {**call, "params": {"name": "status", "_meta": old}},
                                   {**good, "MCP-Protocol-Version": "1999-01-01"})
        err = json.loads(body)["error"]
        assert status == 400 and err["code"] == -32022 and "2026-07-28" in err["data"]["supported"]
        # a handshake-era version in _meta is refused, and not listed as supported there (a client picking from the
        # list went round in a circle); a version that is no string is a shape error
        for version, code in (("2025-11-25", -32022), (2026, -32602), (["2026-07-28"], -32602)):
            meta = {**MODERN_META, "io.modelcontextprotocol/protocolVersion": version}
            status, _, body = post_raw(url, {**call, "params": {"name": "status", "_meta": meta}},
                                       {**good, "MCP-Protocol-Version": str(version)})
            err = json.loads(body)["error"]
            assert status == 400 and err["code"] == code, body
            assert code != -32022 or "2025-11-25" not in err["data"]["supported"]
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202 and body == b""
        status, _, body = post_raw(url, b"{not json")
        assert status == 400 and json.loads(body)["error"]["code"] == -32700
        # a batch is 2025-03-26's (the revision assumed without MCP-Protocol-Version): refused under a later one
        status, _, body = post_raw(url, [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}],
                                   {"MCP-Protocol-Version": "2025-06-18"})
        assert status == 400 and json.loads(body)["error"]["code"] == -32600
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                   {"Origin": "http://evil.example"})
        assert status == 403
        # the handshake era: an unsupported MCP-Protocol-Version header is a 400 (2025-06-18 on)
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                                   {"MCP-Protocol-Version": "1999-01-01"})
        assert status == 400 and json.loads(body)["id"] == 3 and "not supported" in json.loads(body)["error"]["message"]
        # the handshake era: a request without _meta is served, errors come back in a 200
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                         "params": {"name": "nope"}}, {"MCP-Protocol-Version": "2025-11-25"})
        assert status == 200 and json.loads(body)["error"]["code"] == -32602


BATCH = [{"jsonrpc": "2.0", "id": 2, "method": "ping"},
         {"jsonrpc": "2.0", "method": "notifications/initialized"},
         {"jsonrpc": "2.0", "id": "s", "method": "tools/call",
          "params": {"name": "search", "arguments": {"query": RAG_Q, "top_k": 1}}},
         7, {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {}}]


def check_batch_reply(reply) -> None:
    assert isinstance(reply, list) and [r["id"] for r in reply] == [2, "s", None, 4], reply
    assert reply[0]["result"] == {} and reply[1]["result"]["structuredContent"]["results"][0]["source"] == NOTE
    assert reply[2]["error"]["code"] == -32600                         # 7 is no message: answered alone
    assert reply[3]["error"]["code"] == -32600 and "batch" in reply[3]["error"]["message"]   # initialize: alone


def test_a_2025_03_26_batch_is_answered_on_stdio_and_http(ingested, env):
    """MCP 2025-03-26 says a server MUST accept JSON-RPC batches; localrag agrees on 2025-03-26 in initialize (and
    over HTTP a request without MCP-Protocol-Version is 2025-03-26), yet answered every batch with -32600."""
    s = RawStdio(env)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert s.recv()["result"]["protocolVersion"] == "2025-03-26"
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send(BATCH)
    check_batch_reply(s.recv())
    s.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])   # only notifications: nothing is sent
    s.send([])
    assert s.recv() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "an empty JSON-RPC batch: send at least one message"}}
    code, rest, err = s.close()
    assert code == 0 and rest == b"", err
    config, _, _ = ingested
    with serving(config) as url:
        status, headers, body = post_raw(url, BATCH)
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        check_batch_reply(json.loads(body))
        status, _, body = post_raw(url, BATCH, {"MCP-Protocol-Version": "2025-03-26"})
        assert status == 200 and len(json.loads(body)) == 4
        assert post_raw(url, [{"jsonrpc": "2.0", "method": "notifications/initialized"}])[:3:2] == (202, b"")
        status, _, body = post_raw(url, [])
        assert status == 400 and json.loads(body)["error"]["code"] == -32600
        # a batch of only messages that cannot be read as requests is a 400, as each of them alone is
        unreadable = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [None]}, 7, BATCH[4]]
        status, _, body = post_raw(url, unreadable)
        assert status == 400 and [r["error"]["code"] for r in json.loads(body)] == [-32602, -32600, -32600], body
        status, _, body = post_raw(url, BATCH, {"MCP-Protocol-Version": "2025-11-25"})
        assert status == 400 and "2025-03-26 only" in json.loads(body)["error"]["message"]


def inline(node, spec):
    """An OpenAPI 3.0 schema as plain JSON Schema: $refs resolved, `nullable` as a null alternative."""
    if isinstance(node, list):
        return [inline(x, spec) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return inline(spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]], spec)
    out = {k: inline(v, spec) for k, v in node.items() if k not in ("nullable", "example")}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") else out


def test_openapi_request_schema_of_post_mcp_takes_what_the_route_takes(ingested):
    """The request schema required `method`, yet a response (a result or an error, no method) is accepted with 202,
    as the transport says; now it describes a request, a notification, a response and a batch of them: every body
    /mcp accepts (200, 202) is valid, every body it refuses as unreadable (400) is not."""
    import jsonschema
    config = ingested[0]
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    result, error = {"jsonrpc": "2.0", "id": 9, "result": {}}, {"jsonrpc": "2.0", "id": 9, "error": {
        "code": -32601, "message": "Method not found"}}
    bodies = [(ping, 200), (note, 202), (result, 202), (error, 202), ({**error, "id": None}, 202),
              ([ping, note, result], 200), ([note, error], 202),
              ([], 400), (7, 400), ({"jsonrpc": "2.0", "id": 1}, 400), ({**ping, "id": None}, 400),
              ({**ping, "id": 1.5}, 400), ({**ping, "jsonrpc": "1.0"}, 400), ({**ping, "params": [1]}, 400),
              ([7, {"jsonrpc": "2.0"}], 400), ({**note, "params": 5}, 400), ({**result, "id": None}, 400),
              ({**result, "result": 5}, 400), ({**result, "error": error["error"]}, 400), ({**result, "id": 1.5}, 400),
              ({**error, "error": {"code": "x", "message": "m"}}, 400), ({"jsonrpc": "2.0", "result": {}}, 400),
              ([{**note, "params": 5}, {**error, "error": 5}], 400)]
    with serving(config) as url:
        spec = json.loads(urllib_get(url + "/openapi.json"))
        schema = inline(spec["paths"]["/mcp"]["post"]["requestBody"]["content"]["application/json"]["schema"], spec)
        for body, want in bodies:
            status, _, raw = post_raw(url, body)
            assert status == want, (body, status, raw)
            errors = list(jsonschema.Draft4Validator(schema).iter_errors(body))
            assert (errors == []) == (status != 400), (body, status, [e.message for e in errors])


# Notifications and responses a client may send: the valid ones are never answered (202 over HTTP, no line on stdio),
# the others are refused alike on both (a 400 over HTTP), with an error whose id is null.
_NOTE = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_RESULT, _ERROR = {"jsonrpc": "2.0", "id": 9, "result": {}}, {"jsonrpc": "2.0", "id": 9, "error": {
    "code": -32601, "message": "Method not found"}}
NOT_ANSWERED = [_NOTE, {**_NOTE, "params": None}, {**_NOTE, "params": {"_meta": {}}}, _RESULT, _ERROR,
                {**_ERROR, "id": None}, {**_ERROR, "id": "x", "error": {"code": 1, "message": "m", "data": [1]}}]
REFUSED = [({**_NOTE, "params": 5}, -32602, '"params" must be an object'),
           ({**_NOTE, "method": "notifications/cancelled", "params": [1]}, -32602, '"params" must be an object'),
           ({**_NOTE, "params": {"_meta": 5}}, -32602, '"params._meta" must be an object'),
           ({**_RESULT, "result": 5}, -32600, '"result" must be an object (got a JSON number)'),
           ({"jsonrpc": "2.0", "result": {}}, -32600, 'it has no "id"'),
           ({**_RESULT, "id": None}, -32600, '"id" is null, which only an error response may carry'),
           ({**_RESULT, "id": 1.5}, -32600, '"id" must be a string or an integer (got a JSON number)'),
           ({**_RESULT, "id": True}, -32600, '"id" must be a string or an integer (got a JSON boolean)'),
           ({**_RESULT, "error": _ERROR["error"]}, -32600, "it has both result and error"),
           ({**_ERROR, "error": 5}, -32600, '"error" must be an object with code and message (got a JSON number)'),
           ({**_ERROR, "error": {"code": "x", "message": "m"}}, -32600, '"error.code" must be an integer'),
           ({**_ERROR, "error": {"code": True, "message": "m"}}, -32600, '"error.code" must be an integer'),
           ({**_ERROR, "error": {"code": 1}}, -32600, '"error.message" must be a string')]


def test_notifications_and_responses_are_checked_alike_on_stdio_and_http(ingested, env):
    """POST /mcp answered 202 to a notification whose params were 5 and to any message with a result or an error
    (no id, a result of 5, an error of 5, both), and stdio dropped them without a word.  JSON-RPC 2.0: such a
    message is no valid notification or response (its Invalid Request is answered with a null id); the transport:
    input a server cannot accept gets an HTTP error status, with an error response that has no id.  Both faces now
    refuse the same messages with the same error, never with the message's id (a client would take it for the
    answer to its own request 9), and still accept the valid ones silently."""
    with serving(ingested[0]) as url:
        for body in NOT_ANSWERED:
            status, _, raw = post_raw(url, body)
            assert (status, raw) == (202, b""), (body, status, raw)
        over_http = []
        for body, code, said in REFUSED:
            status, _, raw = post_raw(url, body)
            reply = json.loads(raw)
            assert status == 400 and reply["id"] is None and reply["error"]["code"] == code, (body, raw)
            assert said in reply["error"]["message"], (body, raw)
            over_http.append(reply)
    lines = [json.dumps(m).encode() for m in NOT_ANSWERED + [b for b, _, _ in REFUSED]]
    proc = subprocess.run([sys.executable, "-m", "localrag", "mcp"], capture_output=True, timeout=60,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, input=b"\n".join(lines) + b"\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr.decode(), proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()] == over_http


def test_openapi_describes_what_post_mcp_really_answers(ingested, monkeypatch):
    """/openapi.json gave /mcp's 401, 403, 408, 411, 413 and 500 localrag's REST error body, left out 406, 415 and
    503, and listed five of the six tools; every /mcp answer is a JSON-RPC message."""
    import jsonschema
    monkeypatch.setenv("LOCALRAG_API_TOKEN", "mcp-token-1234")
    config = localrag.load_config()
    tok = {"Authorization": "Bearer mcp-token-1234"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with serving(config) as url:
        spec = json.loads(urllib_get(url + "/openapi.json"))
        op = spec["paths"]["/mcp"]["post"]
        assert all(name in op["description"] for name in TOOLS), op["description"]
        assert {"406", "415", "503"} <= set(op["responses"])
        for headers, body, want in ((tok, ping, 200), (tok, BATCH, 200), ({}, ping, 401),
                                    ({**tok, "Origin": "http://evil.example"}, ping, 403),
                                    ({**tok, "Content-Type": "text/plain"}, ping, 415),
                                    ({**tok, "Accept": "text/html"}, ping, 406),
                                    (tok, b"x" * (config.max_body_bytes + 1), 413)):
            status, _, raw = post_raw(url, body, headers)
            assert status == want, (status, raw)
            schema = op["responses"][str(status)]["content"]["application/json"]["schema"]
            jsonschema.validate(json.loads(raw), inline(schema, spec))


def urllib_get(url: str) -> bytes:
    import urllib.request
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()


def test_http_duplicate_routing_headers_and_a_compressed_body_are_refused(ingested):
    """Two Mcp-Name (or Mcp-Method, MCP-Protocol-Version) headers: 400 -32020, whichever one a gateway routes on.  A
    compressed body: a 422 saying so (it was "-32700 parse error: empty body").  A body that is not JSON by its
    Content-Type: 415; an Accept without JSON: 406 (the SDK's server answers so)."""
    import http.client
    import urllib.parse
    config, _, _ = ingested
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": "search", "arguments": {"query": RAG_Q}, "_meta": MODERN_META}}).encode()
    with serving(config) as url:
        host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
        for name, values in (("Mcp-Name", ("search", "ask")), ("Mcp-Method", ("tools/call", "tools/list")),
                             ("MCP-Protocol-Version", ("2026-07-28", "2099-01-01"))):
            headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "search")]
            headers = [h for h in headers if h[0] != name] + [(name, v) for v in values]
            conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.putrequest("POST", "/mcp")
            for key, value in [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers]:
                conn.putheader(key, value)
            conn.endheaders(body)
            resp = conn.getresponse()
            reply = json.loads(resp.read())
            conn.close()
            assert resp.status == 400 and reply["error"]["code"] == -32020 and name in reply["error"]["message"]
        routing = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "search"}
        status, _, raw = post_raw(url, body, {"Content-Encoding": "gzip", **routing})
        assert status == 422 and "Content-Encoding" in json.loads(raw)["error"]["message"], raw
        # a form or text/plain body (what a page can send without asking first) and an Accept without JSON
        for headers, want in (({"Content-Type": "text/plain"}, 415),
                              ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
                              ({"Accept": "text/html"}, 406)):
            status, _, raw = post_raw(url, body, {**routing, **headers})
            assert status == want and json.loads(raw)["error"]["code"] == -32600, (headers, raw)
        for accept in ("*/*", "application/json", "text/event-stream, application/json;q=0.9"):
            status, _, raw = post_raw(url, body, {**routing, "Accept": accept})
            assert status == 200, (accept, raw)


# --- raw JSON-RPC over stdio: what a well-behaved client never sends -------------------------------------------------

@pytest.mark.parametrize("data, limit, want, rest", [
    (b"0123456789\n", 10, (b"0123456789", 0, None), b""),
    (b"0123456789\r\n", 10, (b"0123456789", 0, None), b""),            # the limit is the message's, not its CRLF
    (b"01234567890\n", 10, (None, 11, None), b""),                      # one byte over: its size, newline aside
    (b"01234567890\r\n", 10, (None, 11, None), b""),
    (b'{"id": 7, "x": "' + b"a" * 30 + b'"}\r\nnext\n', 10, (None, 48, 7), b"next\n"),   # its id, for the error
    (b"abc", 10, (b"abc", -2, None), b""),                                 # input closed mid-message
    (b"", 10, (None, -1, None), b""),
])
def test_read_message_sizes(data, limit, want, rest):
    """A line of exactly the limit ending in CRLF had been dropped, and a dropped one's size counted its newline."""
    import io
    stream = io.BytesIO(data)
    assert localrag._read_message(stream, limit) == want
    assert stream.read() == rest


class RawStdio:
    def __init__(self, env: dict, stdin=subprocess.PIPE) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "localrag", "mcp"], stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})

    def send(self, data: bytes | dict) -> None:
        self.proc.stdin.write(data if isinstance(data, bytes) else json.dumps(data).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode()[-2000:]
        return json.loads(line)

    def close(self) -> tuple[int, bytes, str]:
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        err = self.proc.stderr.read().decode()
        return self.proc.wait(30), rest, err


def test_bad_jsonrpc_input_gets_errors_and_the_server_stays_up(ingested, env):
    s = RawStdio(env)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    # a tool call before initialize
    s.send({"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "status", "arguments": {}}})
    r = s.recv()
    assert r["id"] == 0 and r["error"]["code"] == -32600 and "initialize" in r["error"]["message"]
    # a ping before initialize is answered: the spec allows one at any time (it was "ping before initialize")
    s.send({"jsonrpc": "2.0", "id": "p0", "method": "ping"})
    assert s.recv() == {"jsonrpc": "2.0", "id": "p0", "result": {}}
    s.send(init)
    assert s.recv()["result"]["protocolVersion"] == "2025-06-18"
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send(b"{this is not json\n")
    r = s.recv()
    assert r["id"] is None and r["error"]["code"] == -32700
    s.send(b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}\n')             # NaN is Python's, not JSON
    r = s.recv()
    assert r["id"] is None and r["error"]["code"] == -32700 and "NaN" in r["error"]["message"]
    s.send(b'{"jsonrpc": "2.0", "id": 5, "id": 6, "method": "ping"}\n')          # a member named twice
    r = s.recv()
    assert r["error"]["code"] == -32700 and "duplicate key 'id'" in r["error"]["message"]
    s.send({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "status"}})      # no id: a notification
    s.send({"jsonrpc": "2.0", "method": "notifications/whatever"})                       # unknown notification
    s.send([{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])                          # a batch
    r = s.recv()
    assert r["id"] is None and r["error"]["code"] == -32600 and "batch" in r["error"]["message"]
    s.send({"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
    assert s.recv()["error"]["code"] == -32601
    s.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": ["status"]})
    assert s.recv()["error"]["code"] == -32602
    s.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search", "arguments": "P1"}})
    r = s.recv()
    assert r["id"] == 5 and r["result"]["isError"]
    assert r["result"]["structuredContent"]["error"]["details"]["field"] == "arguments"
    s.send({"jsonrpc": "2.0", "id": None, "method": "tools/list"})
    assert s.recv()["error"]["code"] == -32600
    s.send({"jsonrpc": "1.0", "id": 6, "method": "tools/list"})
    r = s.recv()
    assert r["error"]["code"] == -32600 and r["id"] == 6   # its id was readable: it was answered with null
    s.send({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"})
    r = s.recv()   # the message said "(MCP forbids null)" of an object
    assert r["error"]["code"] == -32600 and r["error"]["message"].endswith("(got a JSON object)") and r["id"] is None
    big = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "search", "arguments": {"query": "x" * (2 * 1024 * 1024)}}}).encode()
    s.send(big + b"\n")
    r = s.recv()
    assert r["error"]["code"] == -32600 and "limit" in r["error"]["message"]
    assert r["id"] == 7          # read from its first bytes: the client can match the error to its call
    # the official SDK writes the id after the params: found at the end (a null id left the SDK waiting forever)
    s.send(b'{"method":"tools/call","params":{"name":"search","arguments":{"query":"' + b"y" * (2 * 1024 * 1024)
           + b'"}},"jsonrpc":"2.0","id":"call-71"}\n')
    r = s.recv()
    assert r["id"] == "call-71" and r["error"]["code"] == -32600
    # still up, and the earlier notifications got no answer: the next line is this request's
    s.send({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "search",
                                                                          "arguments": {"query": RAG_Q}}})
    r = s.recv()
    assert r["id"] == 8 and not r["result"].get("isError") and r["result"]["structuredContent"]["results"]
    s.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {}})
    assert s.recv()["error"]["message"].startswith("tools/call needs params.name, one of: search, ask")
    s.send({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "status",
                                                                           "arguments": {"verbose": True}}})
    assert "unknown field(s): verbose; it takes no fields" in s.recv()["result"]["content"][0]["text"]
    # stdin closed in the middle of a message
    s.send(b'{"jsonrpc": "2.0", "id": 9, "method": "tools/li')
    code, rest, err = s.close()
    assert code == 0 and rest == b"", rest
    assert "Traceback" not in err and "closed in the middle of a message" in err, err[-2000:]
    assert "notifications/whatever" in err and "a request needs an id" in err


UNPARSED_CALLS = [   # (a message that does not parse, the id it shows)
    (b'{"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "search", "arguments": '
     b'{"query": "x", "top_k": NaN}}}', 21),                       # Python's json.dumps writes a NaN as NaN
    (b'{"jsonrpc": "2.0", "id": "c-22", "method": "tools/call", "params": {"name": "search", "arguments": '
     b'{"query": "caf\xe9"}}}', "c-22"),                            # a Latin-1 byte, not UTF-8
    (b'{"jsonrpc": "2.0", "id": 23, "method": "ping", "params": {"x": ' + b"[" * 50000 + b"]" * 50000 + b"}}", 23),
    (b'{"method": "ping", "params": {"a": 1, "a": 2}, "jsonrpc": "2.0", "id": 24}', 24),   # a member named twice
    (b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', None),      # no valid id to show: null, as before
]


def test_a_message_that_does_not_parse_is_answered_with_its_id(ingested, env):
    """A -32700 carried a null id, so a client whose call held a NaN, a byte that is not UTF-8 or JSON nested too
    deeply waited forever for its answer (as the official SDK did for an oversized message): the id the message
    shows is answered, on stdio and over HTTP."""
    s = RawStdio(env)
    for line, rid in UNPARSED_CALLS:
        s.send(line + b"\n")
        r = s.recv()
        assert r["error"]["code"] == -32700 and r["id"] == rid, (line[:80], r)
    s.send({"jsonrpc": "2.0", "id": 25, "method": "ping"})
    assert s.recv() == {"jsonrpc": "2.0", "id": 25, "result": {}}
    code, rest, err = s.close()
    assert code == 0 and rest == b"" and "Traceback" not in err
    config, _, _ = ingested
    with serving(config) as url:
        for line, rid in UNPARSED_CALLS:
            status, _, body = post_raw(url, line)
            assert status == 400 and json.loads(body)["error"]["code"] == -32700, body[:200]
            assert json.loads(body)["id"] == rid, (line[:80], body[:200])


def test_stdout_carries_only_protocol_messages(ingested, env):
    """Every stdout line is a JSON-RPC message, even while the first tool call opens the database."""
    s = RawStdio(env)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "status", "arguments": {}, "_meta": MODERN_META}})
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}})
    code, rest, err = s.close()
    lines = rest.splitlines()
    assert code == 0 and len(lines) == 2, (rest, err[-1000:])
    replies = [json.loads(line) for line in lines]
    assert [r["id"] for r in replies] == [1, 2] and all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[0]["result"]["resultType"] == "complete"
    assert replies[1]["result"]["ttlMs"] > 0 and replies[1]["result"]["cacheScope"] == "public"


def test_a_tools_list_cursor_is_refused_as_naming_no_page(env):
    """tools/list returns every tool at once (no nextCursor), so a cursor names no page: any cursor, of any type,
    had been ignored; the spec's answer to an invalid cursor is -32602.  None (or no cursor) lists the tools."""
    s = RawStdio(env)
    for rid, cursor in ((1, "page-2"), (2, 7), (3, {"a": 1})):
        s.send({"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {"cursor": cursor, "_meta": MODERN_META}})
    s.send({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": None, "_meta": MODERN_META}})
    code, rest, err = s.close()
    replies = {r["id"]: r for r in map(json.loads, rest.splitlines())}
    for rid in (1, 2, 3):
        assert replies[rid]["error"]["code"] == -32602 and "cursor" in replies[rid]["error"]["message"], replies[rid]
    assert replies[4]["result"]["tools"], replies[4]


def test_whole_number_floats_are_integers_and_fractions_are_refused(ingested, env):
    """`"top_k": 3.0` (a client keeping every JSON number as a double sends it) is the integer 3, as JSON Schema's
    "integer" the tool schemas declare says; it was refused as "top_k must be an integer".  2.5 stays refused,
    naming the argument."""
    s = RawStdio(env)

    def call(rid: int, name: str, arguments: dict) -> dict:
        s.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": name, "arguments": arguments, "_meta": MODERN_META}})
        r = s.recv()
        assert r["id"] == rid and "result" in r, r
        return r["result"]

    r = call(1, "search", {"query": RAG_Q, "top_k": 3.0})
    assert not r.get("isError") and len(r["structuredContent"]["results"]) == 3, r
    r = call(2, "list_notes", {"prefix": "policies/", "limit": 1.0, "offset": 0.0})
    assert not r.get("isError") and len(r["structuredContent"]["notes"]) == 1, r
    for rid, (name, arguments, field) in enumerate((("search", {"query": RAG_Q, "top_k": 2.5}, "top_k"),
                                                    ("list_notes", {"limit": 1e-9}, "limit")), 3):
        r = call(rid, name, arguments)
        err = r["structuredContent"]["error"]
        assert r["isError"] and err["code"] == "invalid_request" and err["details"]["field"] == field, r
        assert err["message"].startswith(f"{field} must be an integer")
    code, _, err = s.close()
    assert code == 0 and "Traceback" not in err


def test_meta_in_params_is_taken_by_every_method(db, env):
    """Every request's params may carry `_meta` (2025-03-26 on: a progress token, a trace context; 2026-07-28: the
    version and capabilities).  A ping naming 2026-07-28 there was -32601 (that revision dropped ping) while a bare
    ping was answered: it is answered too, stamped as that revision's results are.  initialize, tools/list and
    tools/call take `_meta` beside their own params."""
    other = {"progressToken": "t-1", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
             "com.example/request": {"n": 1}}
    s = RawStdio(env)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": MODERN_META}})
    r = s.recv()
    assert r["id"] == 1 and r["result"]["resultType"] == "complete", r
    assert set(r["result"]) == {"resultType", "_meta"}   # nothing but the stamp: an empty result
    s.send({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": other}})
    assert s.recv() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    s.send({"jsonrpc": "2.0", "id": 3, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"},
                       "_meta": other}})
    assert s.recv()["result"]["protocolVersion"] == "2025-11-25"
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {"_meta": other}})
    s.send({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": other}})
    assert s.recv() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    s.send({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": other}})
    assert {t["name"] for t in s.recv()["result"]["tools"]} == TOOLS
    s.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "status", "arguments": {}, "_meta": other}})
    r = s.recv()
    assert r["id"] == 6 and not r["result"].get("isError") and r["result"]["structuredContent"]["checks"], r
    code, rest, err = s.close()
    assert code == 0 and rest == b"" and "Traceback" not in err
    with serving(db) as url:   # over HTTP, with the routing headers a 2026-07-28 request carries
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": MODERN_META}},
                                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "ping"})
        assert status == 200 and json.loads(body)["result"]["resultType"] == "complete", body
        status, _, body = post_raw(url, {"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"_meta": other}})
        assert status == 200 and json.loads(body)["result"] == {}, body


def test_a_lone_surrogate_in_a_reply_is_a_json_escape_on_a_utf8_line(env):
    """An argument named "\\udcff" (a JSON escape no UTF-8 can carry) is echoed by the tool error naming it: the
    message's encoding failed on it, and the client never got an answer to its call."""
    s = RawStdio(env)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "P1", "\udcff": 1}, "_meta": MODERN_META}}
    s.send(json.dumps(call).encode() + b"\n")   # ensure_ascii: the surrogate travels as its escape
    line = s.proc.stdout.readline()
    r = json.loads(line.decode("utf-8"))   # strict UTF-8
    assert r["id"] == 1 and r["result"]["isError"], r
    assert r["result"]["structuredContent"]["error"]["details"]["field"] == "\udcff"
    assert b"\\udcff" in line
    code, _, err = s.close()
    assert code == 0 and "Traceback" not in err


def test_initialize_needs_no_database(env, monkeypatch):
    """Start-up work is deferred to the first tool call: initialize answers even when the database is down."""
    s = RawStdio({**env, "DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x_test"})
    started = time.monotonic()
    s.send({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}})
    assert s.recv()["result"]["supportedVersions"][0] == "2026-07-28"
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "status", "arguments": {}, "_meta": MODERN_META}})
    r = s.recv()
    assert r["result"]["isError"] and r["result"]["structuredContent"]["error"]["code"] == "database_refused"
    code, _, err = s.close()
    assert code == 0 and "Traceback" not in err
    assert time.monotonic() - started < 60


def test_tool_schemas_follow_the_http_field_tables():
    """A field added to the HTTP validation table shows up in the MCP tool's schema and in the OpenAPI document."""
    tools = localrag._mcp_tools()
    assert set(tools["search"].definition()["inputSchema"]["properties"]) == set(localrag._SEARCH_FIELDS)
    assert set(tools["ask"].definition()["inputSchema"]["properties"]) == set(localrag._ASK_FIELDS)
    spec = localrag.openapi_spec()
    for path, fields in (("/search", localrag._SEARCH_FIELDS), ("/ask", localrag._ASK_FIELDS)):
        schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert set(schema["properties"]) == set(fields)
    # JSON Schema for a model: null is no enum value (strict function-calling providers reject it); reading a
    # note has bounded strings
    for tool in tools.values():
        for name, prop in tool.definition()["inputSchema"]["properties"].items():
            assert None not in prop.get("enum", ()), (tool.name, name)
    note_props = tools["get_note"].definition()["inputSchema"]["properties"]
    assert note_props["path"]["maxLength"] == note_props["heading"]["maxLength"] == localrag.NOTE_PATH_MAX_CHARS
    assert "details.vaults" in note_props["vault"]["description"]
    assert "similarity" in tools["search"].definition()["description"]      # confidence is no ranking score


# What each record-writing tool returns that differs from call to call.
_PER_CALL = {"answer_id", "drafted_at", "timings", "created_at", "latency_ms"}


def _same_call(value):
    if isinstance(value, dict):
        return {k: _same_call(v) for k, v in value.items() if k not in _PER_CALL}
    if isinstance(value, str):   # a ticket's description says when it was drafted: two calls may straddle a second
        return re.sub(r"Drafted \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\-]\d\d:\d\d", "Drafted <time>", value)
    return [_same_call(v) for v in value] if isinstance(value, list) else value


def test_null_for_an_optional_argument_is_leaving_it_out_in_schema_and_behaviour(ingested, env):
    """SDK clients and some models send null for "not given".  The server took null as not given for every optional
    argument, yet the tool schemas allowed no null, so a client validating its call against inputSchema refused
    its own call.  Driven with the SDK client: for each tool and optional argument, {argument: null} is valid by the
    tool's schema and answered exactly as the call without it."""
    import jsonschema
    given = {"search": {"query": RAG_Q}, "ask": {"question": RAG_Q}, "get_note": {"path": NOTE},
             "list_notes": {}, "draft_ticket": {"question": RAG_Q}, "status": {}}

    async def go() -> list:
        seen = []
        async with Client(stdio_params(env), mode="auto") as client:
            for tool in (await client.list_tools()).tools:
                validator = jsonschema.Draft202012Validator(tool.input_schema)
                validator.check_schema(tool.input_schema)
                alone = await client.call_tool(tool.name, given[tool.name])
                assert not alone.is_error, alone.content
                for name, prop in tool.input_schema.get("properties", {}).items():
                    if name in tool.input_schema.get("required", []):
                        continue
                    args = {**given[tool.name], name: None}
                    assert list(validator.iter_errors(args)) == [], (tool.name, name, prop)
                    assert "Null is the same as leaving it out" in prop["description"], (tool.name, name)
                    got = await client.call_tool(tool.name, args)
                    assert not got.is_error, (tool.name, name, got.content)
                    assert _same_call(got.structured_content) == _same_call(alone.structured_content), (tool.name,
                                                                                                        name)
                    seen.append(f"{tool.name}.{name}")
        return seen

    seen = asyncio.run(go())
    assert len(seen) == sum(len(t.fields) - len(t.required) for t in localrag._mcp_tools().values()) == 22, seen


def test_hints_in_json_error_bodies_name_localrag_as_it_was_started(ingested, env, monkeypatch, tmp_path):
    """Under the zipapp the hints on stderr said `python3 localrag.pyz show --list`, but the JSON error bodies (the
    HTTP API, MCP tool errors over HTTP and stdio) still said `localrag show --list`, a command an agent of a pyz user
    cannot run.  Both ways: run as the pyz (a real zipapp of this module on stdio), and as `localrag`."""
    import urllib.error
    import zipfile
    config = ingested[0]
    missing = {"name": "get_note", "arguments": {"path": "no-such-note.md"}, "_meta": MODERN_META}
    mcp_headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "get_note"}

    def hints_over_http() -> list[str]:
        with serving(config) as url:
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib_get(url + "/notes?path=no-such-note.md")
            assert info.value.code == 404
            rest = json.loads(info.value.read())["error"]["message"]
            status, _, raw = post_raw(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": missing},
                                      mcp_headers)
            result = json.loads(raw)["result"]
            assert status == 200 and result["isError"], raw
        return [rest, result["structuredContent"]["error"]["message"], result["content"][0]["text"]]

    def hint_on_stdio(*command: str) -> str:
        proc = subprocess.run([sys.executable, *command, "mcp"], capture_output=True, timeout=60,
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                              input=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                "params": missing}).encode() + b"\n")
        result = json.loads(proc.stdout)["result"]
        assert result["isError"] and result["content"][0]["text"].endswith(result["structuredContent"]["error"][
            "message"]), result
        return result["structuredContent"]["error"]["message"]

    monkeypatch.setattr(sys, "argv", ["./field/localrag.pyz", "serve"])
    for message in hints_over_http():
        assert "`python3 ./field/localrag.pyz show --list`" in message and "`localrag " not in message, message
    monkeypatch.setattr(sys, "argv", ["localrag", "serve"])
    for message in hints_over_http():
        assert "`localrag show --list`" in message, message
    pyz = tmp_path / "localrag.pyz"
    with zipfile.ZipFile(pyz, "w") as z:
        z.write(ROOT / "localrag.py", "localrag.py")
        z.writestr("__main__.py", "import sys\nimport localrag\nsys.exit(localrag.main())\n")
    assert f"`{localrag.command_name(str(pyz))} show --list`" in hint_on_stdio(str(pyz))
    assert "`localrag show --list`" in hint_on_stdio("-m", "localrag")


def test_texts_that_are_no_error_name_the_zipapp_it_runs_from(ingested, env, tmp_path):
    """A real zipapp of this module on stdio: an ask whose scope matches nothing said "`localrag show --list` ...
    list the notes" and draft_ticket's description "`localrag tickets create`" (commands an agent of a pyz user
    passes on, and that user cannot run); they name the pyz.  Run as `python -m localrag`, they say `localrag`."""
    import zipfile
    pyz = tmp_path / "localrag.pyz"
    with zipfile.ZipFile(pyz, "w") as z:
        z.write(ROOT / "localrag.py", "localrag.py")
        z.writestr("__main__.py", "import sys\nimport localrag\nsys.exit(localrag.main())\n")

    def over_stdio(*command: str) -> tuple[str, str]:
        calls = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                     "name": "ask", "arguments": {"question": RAG_Q, "path": "nowhere/"}, "_meta": MODERN_META}},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}]
        proc = subprocess.run([sys.executable, *command, "mcp"], capture_output=True, timeout=60,
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                              input=b"".join(json.dumps(c).encode() + b"\n" for c in calls))
        asked, listed = [json.loads(line)["result"] for line in proc.stdout.splitlines()]
        assert asked["structuredContent"]["mode"] == "no_answer", asked
        tool = next(t for t in listed["tools"] if t["name"] == "draft_ticket")
        return asked["structuredContent"]["reason"], tool["description"]

    name = localrag.command_name(str(pyz))
    for text in over_stdio(str(pyz)):
        assert f"`{name} " in text and "`localrag " not in text, text
    for text in over_stdio("-m", "localrag"):
        assert "`localrag " in text and "pyz" not in text, text


def test_ask_is_not_annotated_read_only():
    """ask was readOnlyHint/idempotentHint true though each call appends an answer record (clients may auto-approve
    tools marked read-only); the other tools only read."""
    tools = localrag._mcp_tools()
    hints = {name: tool.definition()["annotations"] for name, tool in tools.items()}
    assert hints["ask"]["readOnlyHint"] is False and hints["ask"]["idempotentHint"] is False
    assert hints["ask"]["destructiveHint"] is False
    assert all(h["readOnlyHint"] and h["idempotentHint"] for name, h in hints.items() if name != "ask")


# --- process lifecycle: signals, stdin closed mid-request, the client killed (issue 10) ----------------------------

import signal  # noqa: E402

from robust_util import alive, children, query, wait_for  # noqa: E402

STATUS_CALL = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "status", "arguments": {},
                                                                    "_meta": MODERN_META}}
SEARCH_CALL = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "search", "arguments": {"query": RAG_Q},
                                                                    "_meta": MODERN_META}}


def _mcp_sessions(config, waiting: bool = False, but: int = 0) -> int:
    """Server sessions of localrag connections other than the asking one and `but`; only those waiting on a lock."""
    return query(config, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'localrag' AND pid <> "
                         "pg_backend_pid() AND pid <> :b AND datname = current_database()"
                 + (" AND wait_event_type = 'Lock'" if waiting else ""), b=but)[0][0]


class OwnSession(RawStdio):
    """`localrag mcp` in its own session, so a signal sent to it never reaches pytest."""

    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "localrag", "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     env={**os.environ, **env, "PYTHONPATH": str(ROOT)})

    def finish(self, timeout: float = 30) -> tuple[int, list[dict], str]:
        if self.proc.stdin.closed:
            self.proc.stdin = None   # communicate() would flush it
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, [json.loads(line) for line in out.splitlines()], err.decode()


@contextlib.contextmanager
def tables_locked(config):
    """Every table a search reads, locked by another session: a tool call then waits inside the database."""
    with localrag.Store.open(config) as blocker:
        blocker.run("BEGIN")
        blocker.run("LOCK TABLE documents, chunks, embeddings, keyword_chunks, keyword_postings "
                    "IN ACCESS EXCLUSIVE MODE")
        try:
            yield blocker
        finally:
            blocker.run("ROLLBACK")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_while_idle_exits_with_its_code_and_closes_the_database(ingested, env, sig):
    config = ingested[0]
    s = OwnSession(env)
    s.send({**STATUS_CALL, "id": 1})
    assert s.recv()["id"] == 1
    assert _mcp_sessions(config) == 1        # the pooled connection
    assert children(s.proc.pid) == []
    os.kill(s.proc.pid, sig)
    code, replies, err = s.finish()
    assert code == 128 + sig and replies == [], err
    assert f"mcp stopped ({signal.Signals(sig).name}): 1 request(s) answered" in err and "Traceback" not in err
    wait_for(lambda: _mcp_sessions(config) == 0, timeout=10)


def test_started_by_hand_on_a_terminal_it_says_what_it_waits_for(env):
    """`localrag mcp` typed in a terminal (the README's quick start) printed nothing at all: it reads JSON-RPC from
    stdin, and a silent terminal looked hung.  Now one line on stderr says so; a client's pipe gets no such line,
    and stdout stays protocol only."""
    import pty
    import select
    full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "localrag", "mcp"], stdin=slave, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=full_env)
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        said = proc.stderr.readline().decode() if ready else ""
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
        os.close(slave)
    assert "localrag mcp: waiting for an MCP client's JSON-RPC messages on stdin" in said and "Ctrl-C" in said
    assert proc.returncode == 130 and out == b"" and "Traceback" not in err.decode()
    piped = subprocess.run([sys.executable, "-m", "localrag", "mcp"], input=b"", capture_output=True, env=full_env,
                           timeout=60)
    assert piped.returncode == 0 and b"waiting for" not in piped.stderr and piped.stdout == b""


@pytest.mark.parametrize("reads", [True, False], ids=["client-reads-on", "client-stops-reading"])
def test_a_signal_while_a_long_reply_is_written_never_corrupts_stdout(db, vault, env, reads):
    """SIGTERM while a reply larger than the pipe is written to a client that has not read it yet: the reply goes
    out whole when the client reads on (then exit 143), or, when it does not read for MCP_STOP_WRITE_S, is left
    unfinished with nothing glued onto it.  The interrupted request's error had been appended to the half-written
    line: a line no client could parse."""
    (vault / "Big.md").write_text("# Big\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(600)))
    assert localrag.ingest(db, vault)["status"] == "success"
    s = OwnSession(env)
    s.send({**STATUS_CALL, "id": 1})
    assert s.recv()["id"] == 1
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "get_note", "arguments": {"path": "Big.md", "max_chars": 1_000_000}, "_meta": MODERN_META}})
    time.sleep(1.5)                          # the reply fills the pipe; the server waits for the client to read
    os.kill(s.proc.pid, signal.SIGTERM)
    if not reads:
        time.sleep(localrag.MCP_STOP_WRITE_S + 1.5)
    out, err = s.proc.communicate(timeout=30)
    assert s.proc.returncode == 143, err.decode()
    lines = out.split(b"\n")
    if reads:
        assert lines[-1] == b"" and [json.loads(line)["id"] for line in lines[:-1]] == [2]
        assert json.loads(lines[0])["result"]["structuredContent"]["content"].count("Paragraph") == 600
        assert b"2 request(s) answered" in err
    else:
        assert len(lines) == 1 and b"interrupted" not in out and len(out) >= 4096   # unfinished, nothing glued
        assert b"its reply left unfinished" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_mcp_with_a_stdout_that_cannot_be_written_is_output_unwritable(env, tmp_path):
    init = json.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25"}}).encode() + b"\n"
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "localrag", "mcp"], input=init, stdout=full,
                              stderr=subprocess.PIPE, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == localrag.EXIT_USAGE, proc.stderr
    assert b"[output_unwritable]" in proc.stderr and b"Traceback" not in proc.stderr


def test_sigterm_mid_request_cuts_it_answers_it_and_ends_its_query(ingested, env):
    """A tool call waiting inside the database when SIGTERM comes: exit 143 at once (not when the lock goes), the
    client gets an error for that id, and the server session waiting on the lock is ended, not left behind."""
    config = ingested[0]
    s = OwnSession(env)
    s.send({**STATUS_CALL, "id": 1})
    assert s.recv()["id"] == 1
    with tables_locked(config) as blocker:
        s.send({**SEARCH_CALL, "id": 2})
        wait_for(lambda: _mcp_sessions(config, waiting=True) == 1, timeout=20)
        os.kill(s.proc.pid, signal.SIGTERM)
        code, replies, err = s.finish(timeout=20)
        assert code == 143, err
        assert [r["id"] for r in replies] == [2] and "interrupted (SIGTERM)" in replies[0]["error"]["message"]
        assert "1 in flight cut off" in err and "Traceback" not in err
        wait_for(lambda: _mcp_sessions(config, but=blocker.backend_pid) == 0, timeout=10)   # the lock still held


def test_sigterm_mid_batch_answers_every_request_of_it(ingested, env):
    """A 2025-03-26 batch whose second request waits inside the database when SIGTERM comes: one array back, with
    what was answered and the interrupted error for each request not answered (a single request got the error;
    the batch's requests had got nothing at all, and the client waited on them)."""
    config = ingested[0]
    s = OwnSession(env)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert s.recv()["result"]["protocolVersion"] == "2025-03-26"
    legacy = {k: v for k, v in SEARCH_CALL["params"].items() if k != "_meta"}
    with tables_locked(config) as blocker:
        s.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {**SEARCH_CALL, "id": 2, "params": legacy},
                {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                {"jsonrpc": "2.0", "method": "notifications/initialized"}])
        wait_for(lambda: _mcp_sessions(config, waiting=True) == 1, timeout=20)
        os.kill(s.proc.pid, signal.SIGTERM)
        code, replies, err = s.finish(timeout=20)
        assert code == 143, err
        assert len(replies) == 1 and [r["id"] for r in replies[0]] == ["a", 2, 3], replies
        assert replies[0][0]["result"] == {}
        assert all("interrupted (SIGTERM)" in r["error"]["message"] for r in replies[0][1:])
        # initialize and the batch's "a" were answered (the answers a cut batch had made were sent, not counted)
        assert "2 request(s) answered, 2 in flight cut off (answered with an error)" in err, err
        assert "Traceback" not in err
        wait_for(lambda: _mcp_sessions(config, but=blocker.backend_pid) == 0, timeout=10)


def test_the_stop_line_counts_each_message_of_a_batch(env):
    """`localrag mcp`'s stop line counted reply lines: after initialize and a 2025-03-26 batch of three requests
    and a notification it said "2 request(s) answered" (the batch's line one request); each of its messages
    answered counts, an element refused with an error too, the notification not."""
    s = OwnSession(env)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert s.recv()["result"]["protocolVersion"] == "2025-03-26"
    s.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": "c", "method": 5}])
    replies = s.recv()
    assert [r["id"] for r in replies] == ["a", "b", "c"] and replies[2]["error"]["code"] == -32600, replies
    os.kill(s.proc.pid, signal.SIGTERM)
    code, rest, err = s.finish(timeout=30)
    assert code == 143 and rest == [], err
    assert "mcp stopped (SIGTERM): 4 request(s) answered" in err and "in flight" not in err, err


def test_stdin_closed_mid_request_answers_it_then_exits(ingested, env):
    """The MCP shutdown sequence: the client closes stdin while a request runs; the request is answered, then the
    server exits 0 by itself."""
    config = ingested[0]
    s = OwnSession(env)
    with tables_locked(config):
        s.send({**SEARCH_CALL, "id": 7})
        wait_for(lambda: _mcp_sessions(config, waiting=True) == 1, timeout=20)
        s.proc.stdin.close()
        time.sleep(0.5)
        assert s.proc.poll() is None          # still answering
    code, replies, err = s.finish()
    assert code == 0 and [r["id"] for r in replies] == [7] and replies[0]["result"]["structuredContent"]["results"]
    assert "Traceback" not in err
    wait_for(lambda: _mcp_sessions(config) == 0, timeout=10)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-request"])
def test_client_killed_with_minus_9_leaves_no_server_behind(ingested, env, tmp_path, busy):
    """The client (a process holding the server's pipes) dies with kill -9.  Idle, the server sees stdin close and
    exits; mid-request (a tool call waiting on a lock that is never released), its parent watch stops it within a
    second: no process, and no database session, is left."""
    config = ingested[0]
    client = tmp_path / "client.py"
    client.write_text(
        "import json, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'localrag', 'mcp'], stdin=subprocess.PIPE,\n"
        "                     stdout=subprocess.PIPE, stderr=open(sys.argv[1], 'wb'))\n"
        "print(p.pid, flush=True)\n"
        "p.stdin.write(sys.argv[2].encode() + b'\\n'); p.stdin.flush()\n"
        "print(p.stdout.readline().decode().strip(), flush=True)\n"
        "sys.stdin.readline()   # go on\n"
        "p.stdin.write(sys.argv[3].encode() + b'\\n'); p.stdin.flush()\n"
        "time.sleep(3600)\n")
    log = tmp_path / "server.err"
    parent = subprocess.Popen([sys.executable, str(client), str(log), json.dumps({**STATUS_CALL, "id": 1}),
                               json.dumps({**SEARCH_CALL, "id": 2})], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, start_new_session=True,
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    try:
        server = int(parent.stdout.readline())
        assert json.loads(parent.stdout.readline())["id"] == 1
        with tables_locked(config) if busy else contextlib.nullcontext() as blocker:
            if busy:
                parent.stdin.write(b"go\n")
                parent.stdin.flush()
                wait_for(lambda: _mcp_sessions(config, waiting=True) == 1, timeout=20)
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(10)
            wait_for(lambda: not alive(server), timeout=10)
            # the lock (if any) is still held here
            wait_for(lambda: _mcp_sessions(config, but=blocker.backend_pid if blocker else 0) == 0, timeout=10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(server, signal.SIGKILL)
    err = log.read_text()
    assert "Traceback" not in err, err
    if busy:
        assert "mcp stopped (the client that started it ended): 1 request(s) answered, 1 in flight cut off" in err


def test_a_launcher_that_exits_is_not_a_dead_client(ingested, env, tmp_path):
    """A launcher that starts the server and then exits (`setsid`, a wrapper that forks) while the client keeps
    the pipes: the server is reparented but its stdin still has a writer, so it keeps serving; closing stdin ends
    it.  (The parent watch must not take a dead parent alone for a dead client.)"""
    launcher = ("import subprocess, sys, time\n"
                "p = subprocess.Popen([sys.executable, '-m', 'localrag', 'mcp'])\n"
                "sys.stderr.write(f'{p.pid}\\n'); sys.stderr.flush()\n"
                "time.sleep(3600)\n")
    client = subprocess.Popen([sys.executable, "-c", launcher], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True,
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    server = int(client.stderr.readline())
    try:
        for n in (1, 2):
            client.stdin.write(json.dumps({**STATUS_CALL, "id": n}).encode() + b"\n")
            client.stdin.flush()
            assert json.loads(client.stdout.readline())["id"] == n
            if n == 1:                                       # the server runs, its parent watch too
                os.kill(client.pid, signal.SIGKILL)          # the launcher dies; the pipes stay with us
                client.wait(10)
                time.sleep(4 * localrag.MCP_PARENT_CHECK_S)  # the watch has looked several times
                assert alive(server)
        client.stdin.close()
        wait_for(lambda: not alive(server), timeout=30)
        assert "Traceback" not in client.stderr.read().decode()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
