"""groundstate tasks as a verifiers environment, driven by verifiers' own evaluation loop (`vf-eval`'s parser and
`run_eval`, and the `vf-eval` command itself) against a scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf
from pydantic_config import cli
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.cli.resolve import narrow_config, with_positional_taskset
from verifiers.v1.configs.cli.eval import EvalConfig

from groundstate.agents import ScriptedAgent, make_user
from groundstate.integrations.verifiers import GroundstateTaskset, GroundstateTasksetConfig, load_environment
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.attempt import play
from groundstate.worlds.selectors import select_tasks

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
from openai_stub import OpenAIStub, delayed, error, text, tool_call, tool_calls  # noqa: E402

SHOP = ROOT / "tests" / "fixtures" / "shop"


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    """verifiers keeps caches under ~ and would open a run on its platform without --no-push: keep both here."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PRIME_RUNS_MODE", "disabled")
    monkeypatch.setenv("STUB_API_KEY", "sk-stub")


def flags(stub: OpenAIStub, out: Path, *extra: str, n: int = 2) -> list[str]:
    return [
        "groundstate-verifiers",
        "--env.taskset.tasks", str(SHOP),
        "--model", "stub-model",
        "--client.base-url", stub.base_url,
        "--client.api-key-var", "STUB_API_KEY",
        "--env.agent.runtime.type", "subprocess",
        "-n", str(n), "-r", "1", "-c", "1",  # one rollout at a time: the stub answers in script order
        "--no-push", "--no-rich",
        "--output-dir", str(out), "--run.name", "t",
        *extra,
    ]  # fmt: skip


def evaluate(argv: list[str]) -> list[vf.Episode]:
    """verifiers' evaluation loop as `vf-eval` runs it: its own parse of the flags, then `run_eval`."""
    argv = with_positional_taskset(argv)
    return asyncio.run(run_eval(cli(narrow_config(EvalConfig, argv), args=argv)))


def traces(episodes: list[vf.Episode]) -> list[vf.Trace]:
    return sorted((t for e in episodes for t in e.traces), key=lambda t: t.task.data.task_id)


def test_rewards_are_the_final_state_verdicts_and_replay_the_same(tmp_path):
    replies = [tool_call("cancel_order", {"order_id": 1}), text("Order 1 is cancelled."), text("Done, I have cancelled order 2.")]
    with OpenAIStub(replies) as stub:
        episodes = evaluate(flags(stub, tmp_path))
        bodies = [r["body"] for r in stub.requests]
    cancel, refuse = traces(episodes)
    assert (cancel.task.data.task_id, refuse.task.data.task_id) == ("shop-cancel", "shop-refuse")
    assert cancel.ok and refuse.ok
    assert {k: v.score for k, v in cancel.rewards.items()} == {"final_state": 1.0}
    # the reply claims success, the database says otherwise: 0, whatever the reply says
    assert {k: v.score for k, v in refuse.rewards.items()} == {"final_state": 0.0}
    assert cancel.info["groundstate"]["tool_calls"] == [{"name": "cancel_order", "arguments": {"order_id": 1}, "ok": True, "write": True}]
    # the model saw the run's model name, the domain's policy as system message and the domain's tools
    assert {b["model"] for b in bodies} == {"stub-model"}
    assert bodies[0]["messages"][0]["role"] == "system" and bodies[0]["messages"][1] == {"role": "user", "content": "Please cancel order 1."}
    assert "cancel_order" in {t["function"]["name"] for t in bodies[0]["tools"]}
    # the same tool calls replayed through groundstate's own attempt path give the same verdict, whole
    pairs = {t.id: (t, d) for t, d in select_tasks(str(SHOP))}
    for trace in (cancel, refuse):
        task, domain = pairs[trace.task.data.task_id]
        calls = [{"tool": c["name"], "args": c["arguments"]} for c in trace.info["groundstate"]["tool_calls"]]
        replay = asyncio.run(play(task, domain, ScriptedAgent(calls), make_user("scripted", task), backend=SqliteBackend()))
        assert replay.verdict.to_json() == trace.info["groundstate"]["verdict"]


def test_an_endpoint_failure_is_a_failed_rollout_never_a_zero(tmp_path):
    with OpenAIStub([error(400, "stub: bad request")]) as stub:
        [trace] = traces(evaluate(flags(stub, tmp_path, n=1)))
    assert not trace.ok
    assert trace.rewards.get("final_state") is None  # no score recorded: a trainer skips it
    assert [e.type for e in trace.errors] == ["GroundstateError"] and "stub: bad request" in trace.errors[0].message
    assert "EndpointError" in trace.info["groundstate"]["verdict"]["system_error"]


def test_verifiers_own_turn_cap_stops_the_agent_and_the_state_is_graded(tmp_path):
    with OpenAIStub([tool_call("cancel_order", {"order_id": 1})]) as stub:
        [trace] = traces(evaluate(flags(stub, tmp_path, "--env.agent.max-turns", "1", n=1)))
        assert len(stub.requests) == 1  # the second model call never left verifiers
    assert trace.ok and trace.stop_condition == "max_turns"
    assert trace.rewards["final_state"].score == 1.0  # the cancellation happened before the cap
    assert trace.info["groundstate"]["finish_reason"] == "agent_done"


def test_groundstate_limits_hold_inside_verifiers(tmp_path):
    replies = [tool_call("get_order", {"order_id": 1}), tool_call("cancel_order", {"order_id": 1}), text("Done.")]
    with OpenAIStub(replies) as stub:
        [trace] = traces(
            evaluate(flags(stub, tmp_path, "--env.agent.harness.id", "groundstate-verifiers", "--env.agent.harness.max-turns", "1", n=1))
        )
        assert len(stub.requests) == 1
    assert trace.ok and trace.info["groundstate"]["finish_reason"] == "max_turns"
    assert trace.rewards["final_state"].score == 0.0  # it looked but never cancelled


def test_the_vf_eval_command_finds_the_taskset_and_writes_the_rewards(tmp_path):
    vf_eval = Path(sys.executable).with_name("vf-eval")
    replies = [tool_call("cancel_order", {"order_id": 1}), text("Cancelled.")]
    with OpenAIStub(replies) as stub:
        proc = subprocess.run([str(vf_eval), *flags(stub, tmp_path, n=1)], capture_output=True, text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = list(tmp_path.rglob("traces.jsonl"))
    [episode] = [json.loads(line) for line in path.read_text().splitlines()]
    [trace] = episode["traces"]
    assert trace["ok"] is True and trace["rewards"]["final_state"]["score"] == 1.0
    assert trace["info"]["groundstate"]["verdict"]["reward"] == 1


def test_rubric_tasks_and_empty_selections_are_refused(tmp_path):
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    tasks = shop / "tasks" / "basic.yaml"
    tasks.write_text(tasks.read_text().replace("    family: single_write\n", "    family: single_write\n    rubrics: [Was the agent polite?]\n", 1))
    with pytest.raises(ValueError, match="shop-cancel has reply rubrics"):
        GroundstateTaskset(GroundstateTasksetConfig(tasks=str(shop))).load()
    with pytest.raises(ValueError, match="matched no task"):
        GroundstateTaskset(GroundstateTasksetConfig(tasks="no-such-task-*")).load()


def test_load_environment_gives_a_verifiers_env_over_the_selection():
    env = load_environment(tasks=str(SHOP), max_turns=4)
    assert isinstance(env, vf.Env)
    assert env.config.agent.harness.max_turns == 4 and env.config.agent.runtime.type == "subprocess"
    ids = [t.data.task_id for t in GroundstateTaskset(env.config.taskset).load()]
    assert ids == [t.id for t, _ in select_tasks(str(SHOP))]


def test_gold_and_no_op_of_bundled_tasks_get_the_verdicts_of_play(tmp_path):
    """Parity on the bundled suite: each task's gold (its calls in one assistant turn) and its no-op, played through
    verifiers' loop, get exactly the verdict `play` gives the same calls (every task here ends when the agent replies)."""
    pairs = [(t, d) for t, d in select_tasks("kiosk,retail,banking") if not t.user.script and not t.rubrics]
    sample = pairs[:: max(1, len(pairs) // 24)][:24]
    ids = tmp_path / "ids.yaml"
    ids.write_text("".join(f"- {t.id}\n" for t, _ in sample))
    replies = []
    for task, _ in sample:  # verifiers runs the tasks in selection order, gold first, then the no-op
        replies += [tool_calls(*((c.tool, c.args) for c in task.gold)), text("Done.")]
    replies += [text("Done.") for _ in sample]
    argv = flags_for(ids, tmp_path, n=len(sample))
    with OpenAIStub(replies[: 2 * len(sample)]) as stub:
        gold = {t.task.data.task_id: t for t in traces(evaluate(argv(stub, "gold")))}
    with OpenAIStub(replies[2 * len(sample) :]) as stub:
        noop = {t.task.data.task_id: t for t in traces(evaluate(argv(stub, "noop")))}
    assert set(gold) == set(noop) == {t.id for t, _ in sample}
    for task, domain in sample:
        for trace, calls, want in ((gold[task.id], [c.model_dump() for c in task.gold], 1.0), (noop[task.id], [], 0.0)):
            expected = asyncio.run(play(task, domain, ScriptedAgent(calls), make_user("scripted", task), backend=SqliteBackend()))
            assert trace.ok and trace.rewards["final_state"].score == want, task.id
            assert trace.info["groundstate"]["verdict"] == expected.verdict.to_json(), task.id


def flags_for(selection: Path, out: Path, n: int):
    def argv(stub: OpenAIStub, name: str) -> list[str]:
        a = flags(stub, out / name, n=n)
        a[a.index("--env.taskset.tasks") + 1] = str(selection)
        return a

    return argv


def test_the_documented_example_evaluates_a_chat_model(tmp_path):
    """docs/examples/verifiers_eval.py as docs/INTEGRATIONS.md tells a user to run it, against the scripted server."""
    script = ROOT / "docs" / "examples" / "verifiers_eval.py"
    with OpenAIStub([tool_call("cancel_kiosk_order", {"order_id": 1014}), text("Your order 1014 is cancelled.")], default=text("Bye.")) as stub:
        env = {**os.environ, "OPENAI_BASE_URL": stub.base_url, "MODEL": "stub", "TASKS": "kiosk-cancel-001", "OUT": str(tmp_path)}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kiosk-cancel-001: reward 1.0" in done.stdout
    assert list(tmp_path.rglob("traces.jsonl"))


def test_bad_options_are_refused_when_the_flags_are_parsed(tmp_path):
    from pydantic_config.cli import ConfigFileError

    harness = ["--env.agent.harness.id", "groundstate-verifiers"]
    with OpenAIStub([]) as stub:
        for extra, message in (
            ([*harness, "--env.agent.harness.backend", "oracle"], "unknown backend 'oracle'"),
            ([*harness, "--env.agent.harness.user", "garbage"], "unknown user spec 'garbage'"),
            ([*harness, "--env.agent.harness.user", "openai:"], "the model name is empty"),
        ):
            with pytest.raises(ConfigFileError, match=message):
                evaluate(flags(stub, tmp_path, *extra))
        argv = flags(stub, tmp_path)
        argv[argv.index("--env.taskset.tasks") + 1] = "no-such-task-*"
        with pytest.raises(ConfigFileError, match="--env.taskset.tasks 'no-such-task-\\*': task selector 'no-such-task-\\*' matched no task"):
            evaluate(argv)
        assert stub.requests == []  # nothing ran


def test_verifiers_rollout_timeout_fails_the_rollout_naming_it_and_closes_the_sandbox(tmp_path):
    from groundstate.integrations.verifiers import shared_backend

    replies = [tool_call("cancel_order", {"order_id": 1}), delayed(30, text("Done."))]
    with OpenAIStub(replies) as stub:
        [trace] = traces(evaluate(flags(stub, tmp_path, "--env.agent.timeout.rollout", "2", n=1)))
    assert not trace.ok and trace.rewards.get("final_state") is None
    assert [e.type for e in trace.errors] == ["GroundstateError"] and "rollout timeout" in trace.errors[0].message
    assert "attempt-timeout" in trace.errors[0].message  # what to do about it
    assert shared_backend("sqlite").in_use == 0


@pytest.mark.postgres
def test_one_backend_serves_every_rollout_and_postgres_gives_sqlites_verdicts(tmp_path):
    from groundstate.integrations.verifiers import shared_backend

    def script(n):
        return [r for _ in range(n) for r in (tool_call("cancel_order", {"order_id": 1}), text("Done."), text("Done, order 2 is cancelled."))]

    verdicts = {}
    for backend in ("sqlite", "postgres"):
        with OpenAIStub(script(6)) as stub:
            found = traces(
                evaluate(
                    flags(
                        stub, tmp_path / backend, "--env.agent.harness.id", "groundstate-verifiers", "--env.agent.harness.backend", backend, "-r", "6"
                    )
                )
            )
        verdicts[backend] = sorted((t.task.data.task_id, json.dumps(t.info["groundstate"]["verdict"], sort_keys=True)) for t in found)
        assert all(t.ok for t in found) and len(found) == 12
    assert verdicts["sqlite"] == verdicts["postgres"]
    assert shared_backend("postgres").in_use == 0  # every rollout's sandbox closed, on the one backend of the process
