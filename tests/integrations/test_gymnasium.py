"""Gymnasium: `groundstate/Text-v0` passes gymnasium's own environment checker, and a trajectory played through
`gym.make(...).step` gets the verdict `groundstate run`'s attempt path gives it."""

import asyncio
import math
import warnings
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

import groundstate.integrations.gymnasium  # noqa: E402, F401 - registers groundstate/Text-v0
from groundstate.agents import ScriptedUser  # noqa: E402
from groundstate.agents.scripted import make_scripted_agent  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.worlds.attempt import play  # noqa: E402
from groundstate.worlds.domain import iter_tasks  # noqa: E402
from groundstate.worlds.environment import SqlEnvironment  # noqa: E402

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")


def test_gymnasiums_checker_passes_without_a_warning():
    env = gym.make("groundstate/Text-v0", tasks=SHOP)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's checker reports through warnings: any one fails the test
        check_env(env.unwrapped)
    env.close()
    env.close()


def test_the_module_path_form_of_make_registers_on_the_fly():
    env = gym.make("groundstate.integrations.gymnasium:groundstate/Text-v0", tasks=SHOP)
    obs, info = env.reset(options={"task_id": "shop-cancel"})
    assert "Please cancel order 1." in obs and info["task_id"] == "shop-cancel"
    assert {t["function"]["name"] for t in info["tools"]} >= {"cancel_order", "get_order"}
    env.close()


def test_a_seeded_reset_draws_the_same_task():
    env = gym.make("groundstate/Text-v0", tasks="kiosk")
    first = [env.reset(seed=s)[1]["task_id"] for s in range(5)]
    assert first == [env.reset(seed=s)[1]["task_id"] for s in range(5)] and len(set(first)) > 1
    env.close()
    # another environment of the same selection draws the same tasks, and a narrower selection draws only its own
    again = gym.make("groundstate/Text-v0", tasks="kiosk")
    assert [again.reset(seed=s)[1]["task_id"] for s in range(5)] == first
    again.close()
    cancels = gym.make("groundstate/Text-v0", tasks="kiosk-cancel-0*")
    assert all(cancels.reset(seed=s)[1]["task_id"].startswith("kiosk-cancel-0") for s in range(10))
    cancels.close()


def test_the_docs_block_runs_as_written():
    """docs/INTEGRATIONS.md's Gymnasium block, executed as it stands: the call it sends is the drawn task's own."""
    text = (Path(__file__).parents[2] / "docs" / "INTEGRATIONS.md").read_text()
    block = text.split("## Gymnasium", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(block, "docs/INTEGRATIONS.md (Gymnasium)", "exec"), scope)
    assert '{"id": 1014, "status": "cancelled"}' in scope["obs"] and not scope["terminated"]  # the drawn task's own order


def _play_gold(env, task):
    """Play the task's gold through `step`, one call per action, then a closing reply."""
    obs, info = env.reset(options={"task_id": task.id})
    rewards = []
    for call in task.gold:
        obs, reward, terminated, truncated, info = env.step(render_tool_call(call.tool, call.args))
        rewards.append(reward)
        assert not (terminated or truncated) and "[tool " in obs
    while True:
        obs, reward, terminated, truncated, info = env.step("Done.")
        rewards.append(reward)
        if terminated or truncated:
            return rewards, info


def test_every_domains_gold_and_no_op_get_the_verdicts_of_groundstate_run():
    pairs = [p for name in ("banking", "helpdesk", "hr", "insurance", "kiosk", "retail", "travel") for p in iter_tasks([name])[:4]]
    env = gym.make("groundstate/Text-v0", tasks=pairs)
    backend = SqliteBackend()
    for task, domain in pairs:
        rewards, info = _play_gold(env, task)
        assert rewards[:-1] == [0.0] * (len(rewards) - 1)  # nothing until the end
        ours = asyncio.run(play(task, domain, make_scripted_agent("scripted:gold", task, domain), ScriptedUser(task.user.script), backend=backend))
        # a task with reply rubrics is unjudged here (no judge): NaN, never a 0 or a 1
        assert (math.isnan(rewards[-1]) if task.rubrics else rewards[-1] == 1.0) and info["verdict"] == ours.verdict.to_json(), task.id

        env.reset(options={"task_id": task.id})
        while True:  # the no-op: replies only
            _, reward, terminated, truncated, info = env.step("I cannot help with that.")
            if terminated or truncated:
                break
        noop = asyncio.run(play(task, domain, make_scripted_agent("scripted:noop", task, domain), ScriptedUser(task.user.script), backend=backend))
        assert reward == 0.0 and info["verdict"] == noop.verdict.to_json(), task.id
    env.close()


def test_hostile_actions_are_the_agents_failures_never_crashes():
    env = gym.make("groundstate/Text-v0", tasks=SHOP).unwrapped
    env.reset(options={"task_id": "shop-cancel"})
    obs, reward, terminated, truncated, _ = env.step('<tool_call>{"name": "cancel_order", "arguments": {"order_id": "DROP TABLE"}}</tool_call>')
    assert "invalid arguments" in obs and reward == 0.0 and not terminated
    obs, *_ = env.step("<tool_call>{not json</tool_call>")
    assert "error" in obs
    obs, *_ = env.step('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>' + "x" * 30_000)
    assert "unknown tool" in obs
    with pytest.raises(TypeError, match="an action is the assistant's message as text"):
        env.step(["not", "text"])
    with pytest.raises(ValueError, match="'nope' is not one of this environment's tasks"):
        env.reset(options={"task_id": "nope"})
    env.close()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("hello")


def test_limits_truncate_and_the_state_reached_is_graded():
    from groundstate.types import EpisodeLimits

    env = gym.make("groundstate/Text-v0", tasks=SHOP, limits=EpisodeLimits(max_tool_calls=1)).unwrapped
    env.reset(options={"task_id": "shop-multi"})
    env.step(render_tool_call("find_customer", {"email": "c3@example.com"}))
    _, reward, terminated, truncated, info = env.step(render_tool_call("set_tier", {"customer_id": 3, "tier": "gold"}))
    assert truncated and not terminated and reward == 0.0 and info["finish_reason"] == "max_tool_calls"
    env.close()


def test_a_system_error_is_nan_never_zero(monkeypatch):
    env = gym.make("groundstate/Text-v0", tasks=SHOP).unwrapped

    async def broken(self, trajectory, judge=None):
        raise ConnectionError("the database went away")

    monkeypatch.setattr(SqlEnvironment, "grade", broken)
    env.reset(options={"task_id": "shop-cancel"})
    env.step(render_tool_call("cancel_order", {"order_id": 1}))
    _, reward, terminated, _, info = env.step("Done.")
    assert terminated and math.isnan(reward) and "the database went away" in info["verdict"]["system_error"]
    env.close()


def test_a_backend_that_cannot_open_a_sandbox_fails_reset_loudly(monkeypatch):
    backend = SqliteBackend()
    env = gym.make("groundstate/Text-v0", tasks=SHOP, backend=backend).unwrapped

    def down(*a, **k):
        raise ConnectionError("backend is down")

    monkeypatch.setattr(backend, "open", down)
    with pytest.raises(RuntimeError, match="could not start: ConnectionError: backend is down"):
        env.reset(options={"task_id": "shop-cancel"})


def test_abandoning_an_episode_releases_its_sandbox(monkeypatch):
    opened = []
    real_open = SqlEnvironment.open.__func__

    async def tracking(cls, *a, **k):
        env = await real_open(cls, *a, **k)
        opened.append(env.sandbox)
        return env

    monkeypatch.setattr(SqlEnvironment, "open", classmethod(tracking))
    env = gym.make("groundstate/Text-v0", tasks=SHOP).unwrapped
    env.reset(options={"task_id": "shop-cancel"})
    env.step(render_tool_call("get_order", {"order_id": 1}))
    env.reset(options={"task_id": "shop-multi"})  # the first episode is abandoned mid-way
    assert opened[0].closed and not opened[1].closed
    env.close()
    assert opened[1].closed


def test_the_documented_example_runs_a_chat_model_through_the_environment():
    """docs/examples/gymnasium_text_env.py against an OpenAI-compatible server (the scripted stub), with the real
    `openai` client: the model cancels the order, the environment grades it."""
    import os
    import subprocess
    import sys

    from openai_stub import OpenAIStub, text, tool_call

    script = Path(__file__).parents[2] / "docs" / "examples" / "gymnasium_text_env.py"
    with OpenAIStub([tool_call("cancel_kiosk_order", {"order_id": 1014}), text("Your order 1014 is cancelled.")], default=text("Bye.")) as stub:
        env = {**os.environ, "OPENAI_BASE_URL": stub.base_url, "MODEL": "stub", "TASKS": "kiosk-cancel-001"}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        bodies = stub.bodies()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kiosk-cancel-001: reward 1.0" in done.stdout
    assert bodies[0]["tools"]  # the model saw the tools, then its call and the call's result, ids matching
    call, result = bodies[1]["messages"][-2:]
    assert call["role"] == "assistant" and result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]


def test_an_agent_that_outlasts_the_time_limit_is_graded_on_the_state_it_reached():
    """The attempt's clock runs out while the policy is thinking (between steps): the late turn is not executed,
    and the state reached is graded with finish reason `timeout`, as `groundstate run` grades it."""
    import time

    from groundstate.types import EpisodeLimits

    env = gym.make("groundstate/Text-v0", tasks=SHOP, limits=EpisodeLimits(timeout=0.5)).unwrapped
    env.reset(options={"task_id": "shop-cancel"})
    time.sleep(1.0)
    obs, reward, terminated, truncated, info = env.step(render_tool_call("cancel_order", {"order_id": 1}))
    assert truncated and not terminated and info["finish_reason"] == "timeout" and reward == 0.0
    env.close()


@pytest.mark.postgres
def test_an_environment_dropped_without_close_returns_its_postgres_clone(pg_backend):
    """An episode waits for its next step forever: an environment dropped without `close()` used to keep its clone
    in use for good (with a full pool, the next reset then waited forever). Collecting it ends the episode."""
    import gc

    from groundstate.state.postgres import PostgresBackend

    backend = PostgresBackend(pg_backend.dsn, max_open=1)
    try:
        for _ in range(3):
            env = gym.make("groundstate/Text-v0", tasks=SHOP, backend=backend)
            env.reset(options={"task_id": "shop-cancel"})
            env.step(render_tool_call("cancel_order", {"order_id": 1}))
            assert backend.in_use == 1
            del env
            gc.collect()
            assert backend.in_use == 0  # rolled back and pooled: the next environment's reset gets it
        assert backend.cloned == 1 and backend.max_open == 1
    finally:
        backend.close()
    assert backend.sandbox_databases() == []


@pytest.mark.postgres
def test_an_environment_alive_at_exit_returns_its_postgres_clone(pg_backend, tmp_path):
    """A script that exits without closing its environment (mid-episode) leaves no sandbox database behind."""
    import subprocess
    import sys

    script = tmp_path / "leave.py"
    script.write_text(
        "import gymnasium as gym, sys\n"
        "import groundstate.integrations.gymnasium\n"
        "from groundstate.state.postgres import PostgresBackend\n"
        f"backend = PostgresBackend({pg_backend.dsn!r})\n"
        f"env = gym.make('groundstate/Text-v0', tasks={SHOP!r}, backend=backend)\n"
        "env.reset(options={'task_id': 'shop-cancel'})\n"
        "print(backend.sandbox_prefix, backend.in_use, flush=True)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    prefix, in_use = done.stdout.split()
    assert prefix.startswith("gs_sb_") and in_use == "1"
    left = pg_backend._admin_execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (prefix,))
    assert left == []
    assert done.stderr.strip() == ""  # nothing said at exit ("Task was destroyed but it is pending", a traceback)


def test_a_script_that_exits_mid_episode_without_close_says_nothing_at_exit(tmp_path):
    """The docs' Gymnasium block without its `close()`, stopped after a tool call (the episode waits for the next
    action): the process exits cleanly and writes nothing to stderr."""
    import subprocess
    import sys

    script = tmp_path / "leave.py"
    script.write_text(
        "import gymnasium as gym\n"
        "import groundstate.integrations.gymnasium\n"
        "env = gym.make('groundstate/Text-v0', tasks='kiosk')\n"
        "obs, info = env.reset(options={'task_id': 'kiosk-cancel-001'})\n"
        "obs, reward, terminated, truncated, info = env.step("
        '\'<tool_call>{"name": "cancel_kiosk_order", "arguments": {"order_id": 1014}}</tool_call>\')\n'
        "print(terminated, flush=True)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-3000:]
    assert done.stderr.strip() == "", done.stderr[-3000:]


def test_options_that_name_no_task_are_refused_and_the_episode_goes_on():
    env = gym.make("groundstate/Text-v0", tasks=SHOP).unwrapped
    env.reset(options={"task_id": "shop-cancel"})
    env.step(render_tool_call("cancel_order", {"order_id": 1}))
    with pytest.raises(TypeError, match=r"options\['task_id'\] must be a task id \(text\), got list"):
        env.reset(options={"task_id": ["shop-multi"]})
    with pytest.raises(TypeError, match=r"options\['task_id'\] must be a task id \(text\), got dict"):
        env.reset(options={"task_id": {"id": "shop-multi"}})
    with pytest.raises(TypeError, match="options must be a dict or None, got str"):
        env.reset(options="shop-multi")
    with pytest.raises(ValueError, match=r"options\['task_id'\]: 'nope' is not one of this environment's tasks"):
        env.reset(options={"task_id": "nope"})
    _, reward, terminated, _, info = env.step("Done.")  # the refused resets left the episode as it was
    assert terminated and reward == 1.0 and info["task_id"] == "shop-cancel"
    env.close()


def test_most_episodes_without_a_tool_call_are_warned_about_once(monkeypatch):
    """A model that never writes a readable tool call earns 0 everywhere: after 32 such episodes one warning says so."""
    from groundstate.integrations import gymnasium as adapter
    from groundstate.integrations.watch import WINDOW, NoToolCalls, NoToolCallWarning

    monkeypatch.setattr(adapter, "_no_tool_calls", NoToolCalls("Gymnasium", "check the tools"))
    env = gym.make("groundstate/Text-v0", tasks=SHOP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(WINDOW + 8):
            env.reset(options={"task_id": "shop-cancel"})
            while not any(env.step("I would cancel it, if I could call a tool.")[2:4]):
                pass
    env.close()
    said = [w for w in caught if issubclass(w.category, NoToolCallWarning)]
    assert len(said) == 1 and f"{WINDOW} of the first {WINDOW} Gymnasium episodes ended without a tool call" in str(said[0].message)
