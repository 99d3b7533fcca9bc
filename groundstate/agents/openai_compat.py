"""Agents and simulated users backed by an OpenAI-compatible chat-completions endpoint.

An endpoint is named by a spec `openai:MODEL[@BASE_URL]` (parsed by `groundstate.specs`), e.g. `openai:gpt-4.1-mini` (the official
API, or `OPENAI_BASE_URL` when set) or `openai:qwen3-8b@http://127.0.0.1:8000/v1` (a local vLLM or
SGLang server). The API key comes from `OPENAI_API_KEY`, else the placeholder "EMPTY" that local
servers accept.

- `OpenAIAgent` is a policy: the episode's conversation and tool schemas in, one `AgentTurn` out.
- `OpenAIUser` is an LLM playing the task's customer; it only ever sees the text turns.
- Failures of the endpoint (after retries for transient ones) raise `EndpointError`, which the
  runner records as a *system error*: an outage is never scored as the agent's failure.

Both classes keep no per-conversation state, so one instance may serve many concurrent attempts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI, OpenAI

from groundstate.agents.base import delivered_turns
from groundstate.agents.toolcall_format import TOOL_CALL_FORMATS, parse_content
from groundstate.agents.user_audit import UserSimulatorFault, refuse_overlong
from groundstate.jsontext import MAX_DEPTH, json_object, too_deep
from groundstate.specs import Endpoint, parse_endpoint
from groundstate.tasks import Task
from groundstate.types import AgentTurn, ToolCallRequest, Usage, UserTools

T = TypeVar("T")

STOP_TOKEN = "###STOP###"
# The LLM user's output budget per reply: a customer writes one or two sentences, so even a thinking model has room,
# and a user that loops stops long before `types.MAX_REPLY_CHARS`. Not MAX_REPLY_CHARS // 3: the official API refuses a
# budget past a model's output limit (16,384 tokens for gpt-4o-mini), and vLLM one past the context left.
USER_MAX_TOKENS = 4096
# the rounds of its own tool calls an LLM user may make before it answers, in one turn (τ²'s telecom users check or
# change one or two settings of their phone at a time)
MAX_USER_TOOL_ROUNDS = 10
USER_TOOLS_RULE = (
    "- You have tools of your own (your device). Use them when the agent asks you to check or do something on it, "
    "and base everything you say about your device on their results; never make up what they would show."
)

# sampling keys sent as top-level request fields, and the server-specific ones (vLLM, SGLang) that the
# official client only forwards through `extra_body`
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "seed")
EXTRA_BODY_KEYS = ("top_k", "min_p", "repetition_penalty")


class EndpointError(RuntimeError):
    """The model endpoint failed: a non-transient error, or transient ones past the last retry.

    Not the agent's fault; the runner turns it into a system error. `status` is the HTTP status when
    there was a response, `attempts` the number of requests made, `transient` whether retrying was tried, `malformed`
    whether the endpoint answered with something that is not a completion (never retried).
    """

    def __init__(
        self, message: str, *, endpoint: str = "", status: int | None = None, attempts: int = 1, transient: bool = False, malformed: bool = False
    ):
        super().__init__(message)
        self.endpoint, self.status, self.attempts, self.transient, self.malformed = endpoint, status, attempts, transient, malformed


# -- endpoints ---------------------------------------------------------------------------------------


OPENAI_MISSING = "needs the openai package, which this install lacks: pip install 'groundstate[openai]'"


def _openai() -> Any:
    """The `openai` package, imported at first use: 0.4 s that a process which never calls an endpoint (a scripted
    run, a server, a test worker) does not pay. `ValueError` (`OPENAI_MISSING`) where it is not installed (the core
    install: specs still parse, and an endpoint asked for says what to install)."""
    try:
        import openai
    except ImportError:
        raise ValueError(OPENAI_MISSING) from None
    return openai


def require_openai() -> None:
    """`ValueError` (`OPENAI_MISSING`) unless the `openai` client is installed (the `openai` extra)."""
    _openai()


def api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"


def describe_endpoint(model: str, base_url: str | None) -> str:
    return f"{model}@{base_url or os.environ.get('OPENAI_BASE_URL') or OFFICIAL_API}"


OFFICIAL_API = "https://api.openai.com/v1"


@dataclass(frozen=True)
class EndpointProbe:
    """What one request to an endpoint's `/models` found: `problem` (the endpoint cannot serve a run: unreachable, or
    it refuses the key) or a `warning` (it answers but does not list the model), each one line naming the endpoint."""

    endpoint: str
    problem: str | None = None
    warning: str | None = None


def probe_endpoint(spec: Endpoint | str, timeout: float = 10.0) -> EndpointProbe:
    """One `GET /models` to the endpoint of `openai:MODEL[@URL]`, no retries, before a run starts: so a dead or
    unauthorised endpoint is one line now, not a system error per attempt minutes later. Any HTTP answer but 401/403
    counts as reachable (servers without `/models` answer 404 or 501). Without `@URL` and `OPENAI_BASE_URL` the official
    API is meant, and a missing `OPENAI_API_KEY` is the problem."""
    model, base_url = parse_endpoint(spec)
    url = base_url or os.environ.get("OPENAI_BASE_URL") or OFFICIAL_API
    endpoint = f"{model}@{url}"
    key_set = bool(os.environ.get("OPENAI_API_KEY"))
    if url.rstrip("/") == OFFICIAL_API and not key_set:
        return EndpointProbe(
            endpoint,
            problem=f"without @URL requests go to the official API ({OFFICIAL_API}) and OPENAI_API_KEY is not set: "
            "set it, or name your server, e.g. openai:MODEL@http://127.0.0.1:8000/v1",
        )
    try:
        oa = _openai()
    except ValueError:
        return EndpointProbe(endpoint, problem=OPENAI_MISSING)
    client = oa.OpenAI(base_url=url, api_key=api_key(), max_retries=0, timeout=timeout)
    try:
        listed = [m.id for m in client.models.list()]
    except (oa.AuthenticationError, oa.PermissionDeniedError) as e:
        why = "OPENAI_API_KEY is not set" if not key_set else "check OPENAI_API_KEY"
        return EndpointProbe(endpoint, problem=f"{url} refused the request (HTTP {e.status_code}): {why}")
    except oa.APIStatusError:
        return EndpointProbe(endpoint)  # it answered: a server without /models (or a broken one) still serves chat
    except oa.APIConnectionError as e:  # refused, unknown host, timed out (APITimeoutError is one)
        cause = e.__cause__ or e
        return EndpointProbe(
            endpoint, problem=f"cannot reach {url} ({type(cause).__name__}: {str(cause).strip()[:200] or e}): is the server running?"
        )
    except (ValueError, TypeError):  # a reply that is not a model list
        return EndpointProbe(endpoint)
    finally:
        client.close()
    if listed and model not in listed:
        shown = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
        return EndpointProbe(endpoint, warning=f"{url} does not list model {model!r} (it lists {shown}): requests may fail")
    return EndpointProbe(endpoint)


# One async client per (event loop, base URL, key, timeout): the runner builds users per attempt and
# a client per attempt would open a connection pool per attempt. Clients are loop-bound (their pooled
# connections belong to the loop that opened them), hence the loop in the key. Entries of closed loops
# are dropped on the next lookup (a weak-keyed map would not do: the client refers back to its loop).
_ASYNC_CLIENTS: dict[asyncio.AbstractEventLoop, dict[tuple[str | None, str, float], AsyncOpenAI]] = {}


def shared_async_client(base_url: str | None, timeout: float) -> AsyncOpenAI:
    """The running loop's client for this endpoint, created on first use (call from inside the loop)."""
    oa = _openai()
    loop = asyncio.get_running_loop()
    for old in [lp for lp in _ASYNC_CLIENTS if lp.is_closed()]:
        del _ASYNC_CLIENTS[old]
    key = (base_url, api_key(), timeout)
    per_loop = _ASYNC_CLIENTS.setdefault(loop, {})
    client = per_loop.get(key)
    if client is None:
        # max_retries=0: retrying is ours (`with_retries`), so it is explicit, reported in the error and testable
        client = per_loop[key] = oa.AsyncOpenAI(base_url=base_url, api_key=key[1], timeout=timeout, max_retries=0)
    return client


def sync_client(base_url: str | None, timeout: float) -> OpenAI:
    return _openai().OpenAI(base_url=base_url, api_key=api_key(), timeout=timeout, max_retries=0)


# -- retries -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: attempt k (0-based) waits about base_delay·2^k, at most max_delay."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        backoff = min(self.max_delay, self.base_delay * 2**attempt)
        # jitter in [backoff/2, backoff] spreads concurrent attempts that failed together (a 429 burst)
        wait = backoff * (0.5 + random.random() / 2)
        retry_after = _retry_after(error)
        if retry_after is not None:  # the server said how long to wait: honour it, within our cap
            wait = max(wait, min(retry_after, self.max_delay))
        return wait


def env_retry_policy() -> RetryPolicy:
    """The retry policy used when none is passed: the defaults, or `GROUNDSTATE_ENDPOINT_RETRIES` (count) and
    `GROUNDSTATE_ENDPOINT_RETRY_DELAY` (base seconds) — so a run's retries can be tuned without code."""
    base = RetryPolicy()
    retries = os.environ.get("GROUNDSTATE_ENDPOINT_RETRIES")
    delay = os.environ.get("GROUNDSTATE_ENDPOINT_RETRY_DELAY")
    return RetryPolicy(
        max_retries=int(retries) if retries else base.max_retries, base_delay=float(delay) if delay else base.base_delay, max_delay=base.max_delay
    )


def env_timeout(default: float) -> float:
    """Seconds one request may take: `GROUNDSTATE_ENDPOINT_TIMEOUT` when set, else the caller's default."""
    value = os.environ.get("GROUNDSTATE_ENDPOINT_TIMEOUT")
    return float(value) if value else default


def _retry_after(error: BaseException | None) -> float | None:
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: rare from model servers, not worth parsing
        return None


def is_transient(error: BaseException) -> bool:
    """Worth retrying: timeouts, connection failures, 408/409/429 and 5xx. Not 400/401/403/404/422."""
    oa = sys.modules.get("openai")  # an error of the client's means it was imported
    if oa is None:
        return False
    if isinstance(error, oa.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, oa.APIStatusError):
        return error.status_code in (408, 409, 429) or error.status_code >= 500
    return False


def _endpoint_error(error: openai.OpenAIError, endpoint: str, what: str, attempts: int) -> EndpointError:
    status = getattr(error, "status_code", None)
    transient = is_transient(error)
    how = f"gave up after {attempts} attempt(s)" if transient else "non-transient error"
    return EndpointError(
        f"{what} on {endpoint}: {how}: {type(error).__name__}: {error}", endpoint=endpoint, status=status, attempts=attempts, transient=transient
    )


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy, endpoint: str, what: str = "chat completion") -> T:
    """Await `call()`, retrying transient client errors per `policy`; anything else → `EndpointError` at once."""
    oa = _openai()
    for attempt in range(policy.max_retries + 1):
        try:
            return await call()
        except oa.OpenAIError as e:
            if not is_transient(e) or attempt == policy.max_retries:
                raise _endpoint_error(e, endpoint, what, attempt + 1) from e
            await asyncio.sleep(policy.delay(attempt, e))
    raise AssertionError("unreachable")


def with_retries_sync(call: Callable[[], T], policy: RetryPolicy, endpoint: str, what: str = "chat completion") -> T:
    """The blocking twin of `with_retries`, for callers outside an event loop (the judge runs in grader threads)."""
    oa = _openai()
    for attempt in range(policy.max_retries + 1):
        try:
            return call()
        except oa.OpenAIError as e:
            if not is_transient(e) or attempt == policy.max_retries:
                raise _endpoint_error(e, endpoint, what, attempt + 1) from e
            time.sleep(policy.delay(attempt, e))
    raise AssertionError("unreachable")


# -- messages and responses ---------------------------------------------------------------------------

_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.DOTALL)


def split_reasoning(content: str | None) -> tuple[str | None, str | None]:
    """(visible text, inline reasoning) of a message whose server did not separate the reasoning.

    Handles a leading `<think>…</think>` block, a bare `…</think>` (templates that open the block in
    the prompt), and an unclosed `<think>` (cut off by max_tokens: all of it is reasoning).
    """
    if not content:
        return None, None
    if "</think>" in content:
        m = _THINK.match(content)
        if m:
            return content[m.end() :] or None, m.group(1).strip() or None
    if content.lstrip().startswith("<think>"):
        return None, content.lstrip()[len("<think>") :].strip() or None
    return content, None


def _api_arguments(arguments: Any) -> str:
    """Tool-call arguments as the API expects them: a JSON object in a string.

    Arguments the model garbled are sent back as "{}": servers such as vLLM json-decode the history's
    arguments for the chat template and would reject the whole request (a system error) otherwise. The
    model still sees what it wrote: the tool error that answers the call quotes the raw string.
    """
    if isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False)
    return arguments if isinstance(arguments, str) and json_object(arguments) is not None else "{}"


def to_api_messages(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's messages as chat-completions request messages (fresh dicts; the input is untouched).

    Only the fields the API defines are sent: e.g. tool messages keep `tool_call_id` and drop `name`.
    """
    out: list[dict[str, Any]] = []
    for m in conversation:
        role = m["role"]
        if role in ("system", "user"):
            out.append({"role": role, "content": m.get("content") or ""})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if m.get("tool_calls"):
                msg["content"] = m.get("content") or None  # the API's form for "tool calls only"
                msg["tool_calls"] = [
                    {
                        "id": tc["id"],
                        "type": "function",
                        "function": {"name": tc["function"]["name"], "arguments": _api_arguments(tc["function"]["arguments"])},
                    }
                    for tc in m["tool_calls"]
                ]
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": str(m.get("content") or "")})
        else:
            raise ValueError(f"unknown message role {role!r}")
    return out


def parse_tool_call(call: Any, index: int) -> ToolCallRequest:
    """One response tool call → `ToolCallRequest`; unparseable arguments keep the raw string and a `parse_error`.

    `index` is the call's place in the episode (the calls of earlier turns counted, as `local.py` numbers them with
    `id_offset`): a call the server sent without an id is `call_<index>`, so no two calls of a record share an id."""
    fn = call.function
    name = (fn.name or "").strip() if fn is not None else ""
    raw = (fn.arguments if fn is not None else None) or ""
    call_id = call.id or f"call_{index}"  # some servers omit ids; the tool message must still answer one
    if not raw.strip():  # no arguments at all: a call to a parameterless tool
        return ToolCallRequest(call_id, name, {}, parser="native")
    shown = raw if len(raw) <= 2000 else raw[:2000] + "…"
    deep = f"the arguments of {name} are nested deeper than {MAX_DEPTH} levels; raw arguments: {shown}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        problem = f"could not parse the arguments of {name} as JSON ({e.msg} at position {e.pos}); raw arguments: {shown}"
        return ToolCallRequest(call_id, name, raw, problem, parser="native")
    except RecursionError:  # past the parser's own recursion
        return ToolCallRequest(call_id, name, raw, deep, parser="native")
    if too_deep(args):
        return ToolCallRequest(call_id, name, raw, deep, parser="native")
    if not isinstance(args, dict):
        problem = f"the arguments of {name} must be a JSON object, got {type(args).__name__}; raw arguments: {shown}"
        return ToolCallRequest(call_id, name, raw, problem, parser="native")
    return ToolCallRequest(call_id, name, args, parser="native")


def usage_of(response: Any) -> Usage:
    u = getattr(response, "usage", None)
    if u is None:
        return Usage()
    details = getattr(u, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(input_tokens=u.prompt_tokens or 0, output_tokens=u.completion_tokens or 0, cached_input_tokens=cached or 0)


def first_message(response: Any, endpoint: str) -> tuple[Any, str | None]:
    """(message, finish_reason) of the first choice; a response without choices is an endpoint failure."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise EndpointError(f"chat completion on {endpoint}: the response has no choices", endpoint=endpoint, malformed=True)
    first = choices[0] if isinstance(choices, list) else None
    message = getattr(first, "message", None)
    if message is None or not hasattr(message, "content") or not hasattr(message, "tool_calls"):
        # a proxy's error page or a server bug answered 200: the endpoint failed, not the agent
        raise EndpointError(f"chat completion on {endpoint}: malformed response: {str(response)[:200]!r}", endpoint=endpoint, malformed=True)
    return message, first.finish_reason


def reasoning_of(message: Any) -> str | None:
    """Reasoning the server returned in a side field (`reasoning_content`: vLLM, DeepSeek; `reasoning`: others)."""
    extra = getattr(message, "model_extra", None) or {}
    parts = [extra[k] for k in ("reasoning_content", "reasoning") if isinstance(extra.get(k), str) and extra[k]]
    return "\n".join(parts) or None


def split_sampling(sampling: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sampling settings → (top-level request fields, extra_body fields); unset (None) values are left out.

    Unknown keys are an error: a misspelt `temprature` must not silently sample at the server default.
    """
    sampling = dict(sampling or {})
    unknown = sorted(set(sampling) - set(SAMPLING_KEYS) - set(EXTRA_BODY_KEYS))
    if unknown:
        raise ValueError(f"unknown sampling setting(s) {unknown}; known: {', '.join(SAMPLING_KEYS + EXTRA_BODY_KEYS)}")
    top = {k: v for k, v in sampling.items() if k in SAMPLING_KEYS and v is not None}
    extra = {k: v for k, v in sampling.items() if k in EXTRA_BODY_KEYS and v is not None}
    return top, extra


# -- the agent ---------------------------------------------------------------------------------------


class OpenAIAgent:
    """A policy served by an OpenAI-compatible chat-completions endpoint.

    Each `act` sends the whole conversation (system policy first) with the domain's tools and
    `tool_choice="auto"`, and maps the first choice to an `AgentTurn`: text, tool calls (malformed
    arguments become a `parse_error` the episode answers with a tool error), token usage (cached
    prompt tokens included when the server reports them), and in `extra` the finish reason and any
    reasoning text. Reasoning never enters the conversation, so the user never sees it.
    Transient failures are retried per `retry`; then, or on any other failure, `EndpointError`.

    `tool_call_format` (`toolcall_format.TOOL_CALL_FORMATS`) says where calls are read: `native` only from the
    server's `tool_calls`; any other value also from the content of a reply that has none (`parse_content`), for
    servers that hand a model's calls back as text. Each call records its parser (`native`, `hermes`, ...).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        sampling: dict[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        client: AsyncOpenAI | None = None,
        tool_call_format: str = "auto",
    ):
        if tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(f"unknown tool-call format {tool_call_format!r}: use one of {', '.join(TOOL_CALL_FORMATS)}")
        self.model, self.base_url, self.tool_call_format = model, base_url, tool_call_format
        self.sampling, self.extra_body = split_sampling(sampling)
        self.retry = retry or env_retry_policy()
        self.timeout = timeout if timeout is not None else env_timeout(600.0)
        self._client = client
        self.endpoint = describe_endpoint(model, base_url)
        self.name = f"openai:{model}"

    def client(self) -> AsyncOpenAI:
        return self._client or shared_async_client(self.base_url, self.timeout)

    def request(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of the chat.completions.create call for this conversation."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_api_messages(conversation), **self.sampling}
        if tools:  # servers reject tool_choice without tools
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        return kwargs

    async def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        kwargs = self.request(conversation, tools)
        client = self.client()
        response = await with_retries(lambda: client.chat.completions.create(**kwargs), self.retry, self.endpoint)
        message, finish_reason = first_message(response, self.endpoint)
        text, inline_reasoning = split_reasoning(message.content)
        reasoning = "\n".join(r for r in (reasoning_of(message), inline_reasoning) if r) or None
        prior = sum(len(m.get("tool_calls") or []) for m in conversation if m.get("role") == "assistant")  # ids unique per episode
        calls = [parse_tool_call(c, prior + i) for i, c in enumerate(message.tool_calls or [])]
        if not calls and text and self.tool_call_format != "native":
            parsed = parse_content(text, self.tool_call_format, tools, id_offset=prior)
            if parsed.tool_calls:
                text, calls = parsed.content or None, parsed.tool_calls
                reasoning = "\n".join(r for r in (reasoning, parsed.reasoning) if r) or None
        extra: dict[str, Any] = {"finish_reason": finish_reason}
        if reasoning:
            extra["reasoning_content"] = reasoning
        return AgentTurn(text=text, tool_calls=calls, usage=usage_of(response), extra=extra)


# -- the simulated user ------------------------------------------------------------------------------

USER_SYSTEM_PROMPT = """\
You are role-playing a customer who is contacting a customer-service agent. You are the customer, never the agent.

{persona}

What you want: you have already sent the agent this opening message:
\"\"\"{instruction}\"\"\"

{context}

Rules:
- Write only your next message to the agent: plain conversational text, one or two sentences, in character.
- Reveal a fact only when the agent asks for it or clearly needs it; never recite everything at once.
- Never invent facts (ids, emails, dates, amounts) that are not given above. If asked something you do not know, say you do not know.
- Do not tell the agent how to do its job or which tools to use; do not accept offers that go beyond what you want.
- When your request has been fully handled, or the agent has clearly told you it cannot be done, reply with exactly {stop} and nothing else."""


def user_system_prompt(task: Task) -> str:
    persona = task.user.persona or "You are an ordinary customer: polite, brief and to the point."
    if task.user.context:
        context = f"Facts you know (share each only when asked):\n{task.user.context}"
    else:
        context = "You know nothing beyond your opening message."
    return USER_SYSTEM_PROMPT.format(persona=persona.strip(), instruction=task.instruction.strip(), context=context.strip(), stop=STOP_TOKEN)


def user_view(conversation: list[dict[str, Any]], system_prompt: str) -> list[dict[str, Any]]:
    """The conversation as the user LLM sees it: roles swapped, text only.

    Kept: the customer's own messages (ours `user` → its `assistant`) and the agent's messages that
    were delivered to the customer (ours `assistant` without tool calls → its `user`). Dropped: the
    agent's system policy, tool calls, tool results, and assistant text that accompanied tool calls
    (the episode never delivered it). A fixed greeting opens the view because many chat templates
    require the first non-system message to be the `user`'s; same-role neighbours are merged so roles alternate.
    """
    view: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "Hi! How can I help you today?"}]
    for speaker, content in delivered_turns(conversation):
        role = "assistant" if speaker == "user" else "user"
        if view[-1]["role"] == role:
            view[-1] = {"role": role, "content": view[-1]["content"] + "\n\n" + content}
        else:
            view.append({"role": role, "content": content})
    return view


class OpenAIUser:
    """An LLM playing the task's customer (`task.user.persona`, `task.user.context`).

    `reply` returns the customer's next message, or None when it ends the conversation: the model
    wrote `###STOP###` (anywhere) or nothing. The model sees text turns only (see `user_view`).
    Endpoint failures raise `EndpointError` as for the agent. Each request caps the reply at `USER_MAX_TOKENS`, sent
    as `max_completion_tokens` (reasoning models on the official API refuse `max_tokens`; vLLM and SGLang take either),
    unless `sampling` sets its own `max_tokens`; the cap is not part of a user cache's key, since it changes no reply
    that is ever stored. A reply the server cut at the budget (finish reason `length`), or one longer than
    `types.MAX_REPLY_CHARS`, raises `UserSimulatorFault` (overlong_reply): the audit judges whether the agent provoked it
    (`user_audit.UserAudit.excuses`); unaudited, it is a system error.
    """

    def __init__(
        self,
        model: str,
        task: Task,
        base_url: str | None = None,
        sampling: dict[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        client: AsyncOpenAI | None = None,
    ):
        self.model, self.base_url = model, base_url
        # temperature 0 by default: a steadier customer makes attempts of one task differ by the agent, not the user
        self.sampling, self.extra_body = split_sampling({"temperature": 0.0, **(sampling or {})})
        self.system_prompt = user_system_prompt(task)
        self.retry = retry or env_retry_policy()
        self.timeout = timeout if timeout is not None else env_timeout(300.0)
        self._client = client
        self.endpoint = describe_endpoint(model, base_url)
        self.exchanges: list[tuple[int, list[dict[str, Any]]]] = []  # (where in its view, its tool calls and their results)

    def client(self) -> AsyncOpenAI:
        return self._client or shared_async_client(self.base_url, self.timeout)

    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        """With `tools` (the user's own, `Environment.user_tools`), the model is offered them: each round of calls it
        makes is run and answered before it is asked again, at most `MAX_USER_TOOL_ROUNDS` rounds per reply (one more is
        a fault: `overlong_reply`, the reply never came); its exchanges stay in its view on later turns, where they
        happened."""
        view = user_view(conversation, self.system_prompt)
        schemas = tools.schemas() if tools is not None else []
        if schemas:
            view[0] = {"role": "system", "content": self.system_prompt + "\n" + USER_TOOLS_RULE}
            for at, exchange in self.exchanges:  # earlier turns' calls, before the reply they preceded
                view[at:at] = exchange
        at, exchange = len(view), []
        kwargs: dict[str, Any] = {"model": self.model, **self.sampling, **({"tools": schemas} if schemas else {})}
        budget = self.sampling.get("max_tokens")
        # in extra_body: the `openai` releases this install allows (>= 1.40) predate the keyword
        extra = {**self.extra_body, **({} if budget is not None else {"max_completion_tokens": USER_MAX_TOKENS})}
        if extra:
            kwargs["extra_body"] = extra
        client = self.client()
        for _ in range(MAX_USER_TOOL_ROUNDS + 1):
            request = {**kwargs, "messages": view + exchange}
            response = await with_retries(
                lambda r=request: client.chat.completions.create(**r), self.retry, self.endpoint, "user simulator completion"
            )
            message, finish_reason = first_message(response, self.endpoint)
            calls = [parse_tool_call(c, i) for i, c in enumerate(message.tool_calls or [])] if tools is not None and schemas else []
            if not calls:
                break
            records = await tools.act(calls)  # type: ignore[union-attr]
            exchange.append({"role": "assistant", "content": message.content or "", "tool_calls": [c.to_message() for c in calls]})
            exchange += [{"role": "tool", "tool_call_id": c.id, "content": r.result} for c, r in zip(calls, records, strict=True)]
        else:
            raise UserSimulatorFault(
                "overlong_reply", f"the user model made tool calls {MAX_USER_TOOL_ROUNDS + 1} times in one turn without answering"
            )
        if exchange:
            self.exchanges.append((at, exchange))
        text, _ = split_reasoning(message.content)
        text = (text or "").strip()
        if STOP_TOKEN in text:
            return None
        if finish_reason == "length":  # cut: not a message the customer finished (and no text is not it leaving)
            shown = f"{len(text):,} characters: {text[:160]!r}…" if text else "no text: cut while thinking"
            detail = f"the user model did not finish its reply within its budget of {budget or USER_MAX_TOKENS:,} tokens ({shown})"
            raise UserSimulatorFault("overlong_reply", detail)
        if not text:
            return None
        refuse_overlong(text)  # a flood is a fault of the user model, with or without the audit
        return text


# -- factories ---------------------------------------------------------------------------------------


def make_openai_agent(spec: Endpoint | str, sampling: dict[str, Any] | None = None, **kwargs: Any) -> OpenAIAgent:
    """An agent for `openai:MODEL[@BASE_URL]`; `sampling` holds temperature, top_p, max_tokens, seed,
    top_k, min_p, repetition_penalty (unset ones are not sent); kwargs go to `OpenAIAgent` (retry, timeout,
    tool_call_format)."""
    model, base_url = parse_endpoint(spec)
    return OpenAIAgent(model, base_url, sampling, **kwargs)


def make_openai_user(spec: Endpoint | str, task: Task, sampling: dict[str, Any] | None = None, **kwargs: Any) -> OpenAIUser:
    """A simulated user for `openai:MODEL[@BASE_URL]` playing `task`'s customer."""
    model, base_url = parse_endpoint(spec)
    return OpenAIUser(model, task, base_url, sampling, **kwargs)
