"""Cases whose checks are arbitrary Python: their own test function, run by ThinkingBox itself in a subprocess.

Only when the `thinkingbox` package is importable (otherwise such cases are refused when loaded). We use
ThinkingBox's own test worker (`python -m thinkingbox.cli.testscript_worker`, the protocol of its
`TestScriptSubprocess`): a JSON request on stdin — the case's `test_code`, a judge configuration and a
`TestContext` (the final reply, every server's effects and init result, the conversation and tool calls) —
and, after a `\\0` on stdout, a `TestResult`. groundstate never executes the test file itself.

Verdicts: `result` true with reward exactly 1 (or true) passes; an assertion (`result` false) or reward exactly
0 (or false) fails; anything else — NaN, an infinity, 7, a partial 0.5, a string, no reward — is a system error
naming the value, as are an exception other than an assertion (`is_system_error`) and a worker that returns
nothing. A test that uses `judge` needs `--judge openai:MODEL[@URL]`, passed to ThinkingBox as its
documented OpenAI-compatible chat-completions configuration (temperature 0); without one the attempt is
*unjudged*.

The worker runs in a session of its own, under `groundstate.worlds.attempt.play`'s grading bound (`--grade-timeout`):
when that runs out, its whole process group is killed and the attempt is a system error.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

from groundstate.tasks import Task
from groundstate.types import Trajectory, Verdict, system_error
from groundstate.worlds.thinkingbox.case import TbCase

WORKER = "thinkingbox.cli.testscript_worker"
# Handed to the worker when no judge is configured, for tests that never call it (the worker needs a
# configuration to build its Judge object); a call would find nothing listening on the discard port.
UNREACHABLE_JUDGE = {
    "type": "aoai",
    "deployment": "no-judge-configured",
    "endpoint_url": "http://127.0.0.1:9/v1/chat/completions",
    "temperature": 0.0,
    "max_completion_tokens": 16,
    "timeout": 5.0,
}


def uses_judge(case: TbCase) -> bool:
    """Whether the case's test function reads its `judge` argument (directly or by passing it on)."""
    tree = ast.parse(case.test_code)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == case.function:
            return any(isinstance(n, ast.Name) and n.id == "judge" and isinstance(n.ctx, ast.Load) for n in ast.walk(node))
    return False


def judge_config(judge: Any) -> dict[str, Any]:
    """ThinkingBox's OpenAI-compatible judge configuration for a groundstate `Judge` (`openai:MODEL[@URL]`)."""
    base = (judge.base_url or "https://api.openai.com/v1").rstrip("/")
    cfg: dict[str, Any] = {
        "type": "aoai",
        "deployment": judge.model,
        "endpoint_url": f"{base}/chat/completions",
        "is_reasoning": False,
        "temperature": 0.0,
        "seed": 42,
        "max_completion_tokens": 128,
        "timeout": 120.0,
    }
    if os.environ.get("OPENAI_API_KEY"):
        cfg["credential"] = {"type": "api-key", "api_key": os.environ["OPENAI_API_KEY"]}
    return cfg


def test_context(trajectory: Trajectory, effects: dict[str, Any], init_results: dict[str, Any]) -> dict[str, Any]:
    """ThinkingBox's `TestContext` of an attempt, as JSON: reply, effects, init results, messages and tool calls."""
    messages: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, Any]] = []
    for m in trajectory.messages:
        if m["role"] in ("system", "user") or (m["role"] == "assistant" and m.get("content")):
            messages.append({"T": "Text", "role": m["role"], "content": m.get("content") or ""})
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
            except json.JSONDecodeError:
                args = {}
            call = {"T": "ToolCall", "name": c["function"]["name"], "arguments": args if isinstance(args, dict) else {}, "id": c["id"]}
            calls[c["id"]] = call
            messages.append(call)
        if m["role"] == "tool":
            response = {"T": "ToolResponse", "name": m.get("name", ""), "content": m.get("content") or "", "id": m["tool_call_id"]}
            messages.append(response)
            if m["tool_call_id"] in calls:
                pairs.append({"tool_call": calls[m["tool_call_id"]], "tool_response": response})
    return {"response": trajectory.final_reply or "", "effects": effects, "init_result": init_results, "messages": messages, "tool_calls": pairs}


async def run_test_function(
    task: Task, case: TbCase, effects: dict[str, Any], init_results: dict[str, Any], trajectory: Trajectory, judge: Any = None
) -> Verdict:
    """The verdict of the case's own test function on this attempt (see the module docstring)."""
    needs_judge = uses_judge(case)
    if needs_judge and judge is None:
        return Verdict(
            reward=None, unjudged=True, reasons=[f"the test function of {case.uid} calls the judge: unjudged without --judge openai:MODEL[@URL]"]
        )
    request = {
        "code": case.test_code,
        "judge_config": judge_config(judge) if judge is not None else UNREACHABLE_JUDGE,
        "judge_type": "legacy",
        "test_context": test_context(trajectory, effects, init_results),
        "fixtures_config": {},
        "test_uid": case.uid,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        WORKER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = await proc.communicate(json.dumps(request, default=str).encode())
    finally:
        if proc.returncode is None:  # cancelled (the grading bound ran out): the worker and all it started must stop now
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    pos = stdout.rfind(b"\0")
    if pos == -1:
        return system_error(
            f"ThinkingBox's test worker returned no result for {case.uid} (exit {proc.returncode}): {stderr.decode(errors='replace')[-1500:]}",
            "infrastructure",
        )
    try:
        result = json.loads(stdout[pos + 1 :])
    except json.JSONDecodeError as e:
        return system_error(f"ThinkingBox's test worker returned malformed JSON for {case.uid}: {e}", "infrastructure")
    where = f"line {result.get('lineno', -1)}: {result.get('line_content', '').strip()}"
    if result.get("is_system_error"):
        return system_error(f"the test function of {case.uid} raised ({where})\n{result.get('tb', '')[-1500:]}", "grader")
    if result.get("result") is False:
        return Verdict(reward=0, state_reward=0, reasons=[f"test function failed at {where}", str(result.get("tb", ""))[-1500:]])
    reward = result.get("reward")
    if result.get("result") is not True or not _is_exactly(reward, 0, 1):
        return system_error(
            f"the test function of {case.uid} returned reward {reward!r} (result {result.get('result')!r}): "
            "only 1 (or True) passes and 0 (or False) fails; anything else cannot be scored",
            "grader",
        )
    if reward == 0:
        return Verdict(reward=0, state_reward=0, reasons=[f"the test function of {case.uid} returned reward {reward!r}"])
    return Verdict(reward=1, state_reward=1, reasons=[f"the test function of {case.uid} passed"])


def _is_exactly(value: Any, *allowed: int) -> bool:
    """Whether `value` is a JSON boolean or number equal to one of `allowed` (NaN and infinities never are)."""
    return isinstance(value, (bool, int, float)) and any(value == a for a in allowed)
