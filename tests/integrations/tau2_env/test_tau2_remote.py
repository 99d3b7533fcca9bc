"""τ² in its own interpreter (`GROUNDSTATE_TAU2_PYTHON`, `worlds.tau2.remote`): the same verdicts as τ²'s worker of
this interpreter (the default), through the command line; τ² never imported by groundstate's own process; a hanging
tool, a dead worker and an unknown task each end as they must. The interpreter is `make tau2-env`'s `.venv-tau2` where it was built, else this
one (the worker is a process of its own either way)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.records import read_records
from groundstate.types import SandboxLost
from groundstate.worlds.episode import run_episode
from groundstate.worlds.tau2.remote import PYTHON_VAR, RemoteTau2Domain

ROOT = Path(__file__).resolve().parents[3]
OWN = ROOT / ".venv-tau2" / "bin" / "python"
PYTHON = str(OWN if OWN.exists() else Path(sys.executable))
CLI = str(Path(sys.executable).parent / "groundstate")
TASKS = "tau2:telecom:small,tau2:mock"  # the user's own calls (telecom), databases hashed and diffed (mock)


def run(*args: str, cwd: Path, remote: bool) -> None:
    """`groundstate run` with τ² in `PYTHON` (remote), or in a worker of this interpreter (the default)."""
    env = {**os.environ, PYTHON_VAR: PYTHON} if remote else {k: v for k, v in os.environ.items() if k != PYTHON_VAR}
    done = subprocess.run([CLI, "run", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_same_verdicts_in_taus_own_interpreter(tmp_path):
    for agent in ("scripted:gold", "scripted:noop"):
        for remote in (False, True):
            out = f"{agent.split(':')[1]}-{'remote' if remote else 'local'}.jsonl"
            run("--agent", agent, "--user", "scripted:gold", "--tasks", TASKS, "--out", out, cwd=tmp_path, remote=remote)
        local, remote_ = (read_records(tmp_path / f"{agent.split(':')[1]}-{w}.jsonl") for w in ("local", "remote"))
        key = lambda r: r.task_id  # noqa: E731
        pairs = list(zip(sorted(local, key=key), sorted(remote_, key=key), strict=True))
        assert len(pairs) == 29 and all(a.task_id == b.task_id and a.verdict.to_json() == b.verdict.to_json() for a, b in pairs)
        assert all(a.trajectory.to_json() == b.trajectory.to_json() for a, b in pairs)  # user calls included
    noop = read_records(tmp_path / "noop-remote.jsonl")
    assert any(r.verdict.diff and r.verdict.blame is not None for r in noop)  # the keyed diff and blame came across


def test_groundstate_never_imports_tau2_itself():
    script = (
        "import asyncio, sys\n"
        "from groundstate.agents.scripted import make_scripted_agent, ScriptedUser\n"
        "from groundstate.worlds.attempt import play\n"
        "from groundstate.worlds.selectors import select_tasks\n"
        "task, domain = select_tasks('tau2:mock')[0]\n"
        "out = asyncio.run(play(task, domain, make_scripted_agent('scripted:gold', task, domain), ScriptedUser([]), backend=None))\n"
        "print(out.verdict.reward, type(domain).__name__, any(m == 'tau2' or m.startswith('tau2.') for m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, PYTHON_VAR: PYTHON}, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["1", "RemoteTau2Domain", "False"], done.stderr[-3000:]


def test_a_hang_a_dead_worker_and_an_unknown_task():
    """τ²'s retail `calculate` evaluates what the agent wrote: `9**9**9**9` holds Python's lock for good. The worker is
    killed at the attempt's time limit (and the grace), the call is `SandboxLost` (a system error), and the next
    request gets a new worker; an environment of the old one is gone. A task the domain lacks is a `KeyError`."""
    domain = RemoteTau2Domain("retail", PYTHON)
    task = next(t for t in domain.tasks if t.id == "tau2-retail-0")

    async def go():
        from groundstate.types import EpisodeLimits

        env = await domain.open_environment(task, None, EpisodeLimits(timeout=2))
        with pytest.raises(SandboxLost, match="stopped answering"):
            await env.call_tool("calculate", {"expression": "9**9**9**9"})
        other = await domain.open_environment(task, None)  # a new worker
        traj = await run_episode(other, ScriptedAgent([c.model_dump() for c in task.gold], final_text=task.gold_reply), ScriptedUser([]))
        assert (await other.grade(traj)).reward == 1
        with pytest.raises(SandboxLost, match="restarted"):
            await env.call_tool("get_order_details", {"order_id": "#W2378156"})
        domain.bridge.proc.kill()  # the worker dies: its environments are gone, the next request starts another
        domain.bridge.proc.wait()
        with pytest.raises(SandboxLost):
            await other.call_tool("get_order_details", {"order_id": "#W2378156"})
        fresh = await domain.open_environment(task, None)
        assert json.loads((await fresh.call_tool("get_order_details", {"order_id": "#W2378156"})).content)["order_id"] == "#W2378156"
        with pytest.raises(KeyError, match="no such task"):
            await domain.bridge.ask("open", {"domain": "retail", "task": "tau2-retail-nope"})
        for e in (env, other, fresh):
            await e.close()

    asyncio.run(go())


def test_text_that_is_not_valid_unicode_crosses_to_the_worker_and_back():
    """A lone surrogate (what a model may emit, kept as text by the episode) travels escaped, both ways."""
    domain = RemoteTau2Domain("mock", PYTHON)
    task = domain.tasks[0]

    async def go():
        env = await domain.open_environment(task, None)
        try:
            result = await env.call_tool("get_users", {"note": "\ud800"})  # a tool the mock lacks an argument for
            return result, await env.call_tool("get_users", {})
        finally:
            await env.close()

    odd, fine = asyncio.run(go())
    assert not odd.ok and fine.ok  # τ² refused the odd call; the worker lives on


def test_a_request_that_waited_while_its_worker_was_replaced_is_sandbox_lost():
    """A request checks its worker under the bridge's lock, not before taking it: one that waited for its turn while
    its worker was killed is `SandboxLost`, not sent under its old handle to the next worker, where handles count
    from 1 again and would name another attempt's environment; closing it then closes nothing of the new worker's."""
    domain = RemoteTau2Domain("mock", PYTHON)
    task = domain.tasks[0]

    async def go():
        old = await domain.open_environment(task, None)
        bridge = domain.bridge
        bridge.lock.acquire()  # the turn of a request in flight (the hang that gets its worker killed)
        try:
            waiting = asyncio.create_task(old.call_tool("get_users", {}))
            await asyncio.sleep(0.5)  # it passed every check made before the lock and waits for its turn
            bridge.proc.kill()
            bridge.proc.wait()
        finally:
            bridge.lock.release()
        with pytest.raises(SandboxLost, match="restarted"):
            await waiting
        opened = [await domain.open_environment(task, None)]  # the next worker: its handles count from 1 again
        while opened[-1].handle != old.handle:
            opened.append(await domain.open_environment(task, None))
        new = opened[-1]  # the handle number the old environment had
        assert new.generation == old.generation + 1
        await old.close()  # closes nothing in the new worker
        assert (await new.call_tool("get_users", {})).ok
        for env in opened:
            await env.close()

    asyncio.run(go())
