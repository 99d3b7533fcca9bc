"""A scripted OpenAI-compatible chat-completions server for tests, driven over real HTTP.

`OpenAIStub` serves `POST …/chat/completions` on 127.0.0.1 (ephemeral port) from a thread. Each
request is answered by the next scripted `Reply` in its queue (then by `default`) and recorded
with its JSON body, so tests can check exactly what a client sent:

    with OpenAIStub([text("hi"), error(429), tool_call("get_order", {"order_id": 1})]) as stub:
        agent = make_openai_agent(f"openai:m@{stub.base_url}")
        ...
        stub.bodies()  # the request bodies, in order

Helpers build replies: `text`, `tool_call`/`tool_calls` (arguments as a dict, or a raw string for
malformed JSON), `error(status)`, and `delayed(seconds, reply)` (a slow server, for client timeouts).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering


def _usage(usage: tuple[int, int] | tuple[int, int, int] | None) -> dict[str, Any]:
    prompt, completion, *cached = usage or (10, 5)
    u: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached:
        u["prompt_tokens_details"] = {"cached_tokens": cached[0]}
    return u


def completion(message: dict[str, Any], finish_reason: str, usage=None) -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": "stub",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
            "usage": _usage(usage),
        }
    )


def text(content: str | None, *, reasoning_content: str | None = None, usage=None, finish_reason: str = "stop") -> Reply:
    """A plain assistant message; `usage` is (prompt, completion[, cached]) tokens."""
    message: dict[str, Any] = {"content": content}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    return completion(message, finish_reason, usage)


def tool_calls(*calls: tuple[str, dict[str, Any] | str], content: str | None = None, reasoning_content: str | None = None, usage=None) -> Reply:
    """An assistant message calling tools; a string argument is sent verbatim (e.g. malformed JSON)."""
    message: dict[str, Any] = {
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{i}_{name}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    return completion(message, "tool_calls", usage)


def tool_call(name: str, args: dict[str, Any] | str, **kw: Any) -> Reply:
    return tool_calls((name, args), **kw)


def error(status: int, message: str = "stub error", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body={"error": {"message": message, "type": "stub", "code": status}}, headers=headers or {})


def delayed(seconds: float, reply: Reply) -> Reply:
    return Reply(reply.status, reply.body, reply.headers, seconds)


def fact_judge(body: dict[str, Any]) -> Reply:
    """A deterministic judge of reply rubrics (groundstate's `Judge` prompt): "yes" iff the question quotes facts and
    the fenced reply states every one of them (case-insensitive), else "no"."""
    prompt = body["messages"][1]["content"]
    question = prompt.split("\n\n<<<REPLY\n", 1)[0].removeprefix("Question: ")
    reply = prompt.split("<<<REPLY\n", 1)[1].rsplit("\nREPLY>>>", 1)[0].lower()
    facts = re.findall(r'"([^"]+)"', question)
    return text("yes" if facts and all(f.lower() in reply for f in facts) else "no")


# a test that consumes more replies than it scripted fails fast: 400 is not retried by the clients
EXHAUSTED = error(400, "openai stub: no scripted reply left")


class OpenAIStub:
    """The server; use as a context manager. `requests` holds {path, headers (lower-cased names), body} per request received."""

    def __init__(
        self,
        replies: list[Reply] | None = None,
        default: Reply = EXHAUSTED,
        responder: Callable[[dict[str, Any]], Reply] | None = None,
        models: Reply | None = None,
    ):
        self.replies: deque[Reply] = deque(replies or [])
        self.models = models  # the answer to GET /models (what a run probes first); None: 404, a server without the route
        self.gets: list[str] = []  # the paths of GET requests, apart from `requests`
        self.default = default
        self.responder = responder  # answers from the request body once the scripted replies ran out (e.g. `fact_judge`)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with stub._lock:
                    stub.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                    reply = stub.replies.popleft() if stub.replies else None
                if reply is None:
                    reply = stub.responder(body) if stub.responder is not None else stub.default
                if not self.path.endswith("/chat/completions"):
                    reply = error(404, f"openai stub: no route {self.path}")
                if reply.delay:
                    time.sleep(reply.delay)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up: expected
                    pass

            def do_GET(self) -> None:  # noqa: N802
                with stub._lock:
                    stub.gets.append(self.path)
                routed = self.path.endswith("/models") and stub.models is not None
                reply = stub.models if routed else error(404, f"openai stub: no route {self.path}")
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # do not wait for handlers still sleeping out a `delayed` reply
        # a short poll interval: shutdown() waits up to one interval, and every test tears a server down
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, name="openai-stub", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def bodies(self, model: str | None = None) -> list[dict[str, Any]]:
        """Request bodies in arrival order (only those for `model` when given)."""
        with self._lock:
            return [r["body"] for r in self.requests if model is None or r["body"].get("model") == model]

    def __enter__(self) -> OpenAIStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        """Stop serving; safe to call twice (a test may stop the server early to refuse connections)."""
        if not self._thread.is_alive():
            return
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
