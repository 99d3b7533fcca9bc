"""τ² in its own interpreter: the worker end of `worlds.tau2.remote`, run as `python -m groundstate.worlds.tau2.worker`
by τ²'s interpreter (`GROUNDSTATE_TAU2_PYTHON`, a venv with τ² and groundstate's core made by `make tau2-env`; else
groundstate's own).

It reads one JSON request per line on stdin and answers each with one JSON line on stdout, in order: `{"ok": result}`
or `{"error": kind, "message": text}` (kind `hang` for a τ² tool past the attempt's time limit, `task` for an id
its domain does not have, `failed` for anything else). It holds the τ² domains it was asked for and the attempts'
environments by handle; everything τ²-specific (tools, databases, the verdict before rubrics, blame) happens here,
with the same code as in one process (`Tau2Domain`, `Tau2Environment`). Anything τ² prints goes to stderr: stdout
carries the protocol alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from groundstate.types import EpisodeHang, EpisodeLimits, ToolCallRecord, ToolCallRequest, Trajectory
from groundstate.worlds.tau2 import local_tau2_domain as tau2_domain
from groundstate.worlds.tau2.env import Tau2Environment
from groundstate.worlds.tau2.grading import Attempt, blame, tau2_verdict
from groundstate.worlds.tau2.runtime import Tau2Unavailable


class Worker:
    """The state of one worker: open environments by handle."""

    def __init__(self) -> None:
        self.envs: dict[int, Tau2Environment] = {}
        self.next = 1

    def keep(self, env: Tau2Environment) -> dict[str, Any]:
        handle, self.next = self.next, self.next + 1
        self.envs[handle] = env
        own = env.user_tools()
        return {
            "env": handle,
            "initial_messages": env.initial_messages(),
            "tool_schemas": env.tool_schemas(),
            "user_tool_schemas": own.schemas() if own is not None else None,
        }

    async def handle(self, op: str, a: dict[str, Any]) -> Any:
        if op == "domain":
            d = tau2_domain(a["domain"])
            return {
                "tasks": [t.model_dump(mode="json") for t in d.tasks],
                "lists": d.lists,
                "writes": {n: s.write for n, s in d.tools.specs.items()},
                "schemas": d.tools.openai_schemas(),
                "content_hash": d.content_hash,
                "system_prompt": d.system_prompt(),
            }
        if op == "open":
            d = tau2_domain(a["domain"])
            task = _task(d, a["task"])
            limits = EpisodeLimits(timeout=a.get("timeout"))
            return self.keep(await d.open_environment(task, None, limits))  # type: ignore[arg-type]
        if op == "blame":
            d = tau2_domain(a["domain"])
            task = _task(d, a["task"])
            calls = [ToolCallRecord.model_validate(c) for c in a["calls"]]
            writes = {n: s.write for n, s in d.tools.specs.items()}
            return blame(d.fresh_env(), d.tau2_task(task), d.gold_state(task), calls, writes).to_json()
        env = self.envs.get(a["env"])
        if env is None:
            raise ValueError(f"no open environment {a['env']} in this worker (closed, or of another worker)")
        if op == "call":
            r = await env.call_tool(a["name"], a["arguments"])
            return {"ok": r.ok, "content": r.content, "write": r.write}
        if op == "user_act":
            own = env.user_tools()
            assert own is not None, "this environment gives the user no tools"
            calls = [ToolCallRequest(c["id"], c["name"], c["arguments"], c.get("parse_error")) for c in a["calls"]]
            return [r.to_json() for r in await own.act(calls)]
        if op == "grade":
            traj = Trajectory.model_validate(a["trajectory"])
            attempt = Attempt(env.task, env.tau2_task, env.env, env.log, len(env.initial_messages()), env.gold)
            return tau2_verdict(attempt, traj).to_json()
        if op == "fork":
            return self.keep(await env.fork())["env"]
        if op == "close":
            await self.envs.pop(a["env"]).close()
            return None
        raise ValueError(f"unknown operation {op!r}")


def _task(domain: Any, task_id: str) -> Any:
    found = next((t for t in domain.tasks if t.id == task_id), None)
    if found is None:
        raise KeyError(f"no such task in τ² domain {domain.tau2_domain}: {task_id!r}")
    return found


async def serve(lines: Any, out: Any) -> None:
    worker = Worker()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, lines.readline)
        if not line:
            return
        try:
            request = json.loads(line)
            answer: dict[str, Any] = {"ok": await worker.handle(request["op"], request.get("args", {}))}
        except EpisodeHang as e:
            answer = {"error": "hang", "message": str(e)}
        except Tau2Unavailable as e:
            answer = {"error": "unavailable", "message": str(e)}
        except KeyError as e:
            answer = {"error": "task", "message": str(e.args[0]) if e.args else "no such task"}
        except Exception as e:  # noqa: BLE001 - every failure is answered, naming itself; the worker goes on
            answer = {"error": "failed", "message": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer, default=str) + "\n")  # ASCII: a lone surrogate travels escaped
        out.flush()


def main() -> None:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol's own stdout
    os.dup2(2, 1)  # anything else printed to stdout (τ², its dependencies) goes to stderr
    sys.stdout = sys.stderr
    asyncio.run(serve(sys.stdin, out))


if __name__ == "__main__":
    main()
