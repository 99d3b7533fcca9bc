"""The ThinkingBox bridge end to end: ThinkingBox-format dataset files written here, a stand-in MCP stdio server
(tests/fixtures/thinkingbox/server.py: the two reserved tools, an in-memory SQLite database, a hash and a
golden replay), and groundstate's own attempt path, runner, metrics, selection and lint on top."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from openai_stub import OpenAIStub, text, tool_call
from tb_standin import FRAMEWORK, GROUP1, HELPERS, SCENARIO, SERVER, tb_pairs, tb_play

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser, make_scripted_agent
from groundstate.state import make_backend
from groundstate.tasks import TaskFileError
from groundstate.tools.fork_pool import zygote_pids
from groundstate.types import EpisodeLimits
from groundstate.worlds.attempt import play
from groundstate.worlds.selectors import select_tasks
from groundstate.worlds.thinkingbox import TbDomain, deep_merge, load_thinkingbox, merge_init


def _alive(pid: int) -> bool:
    """Whether the process still exists, running or as a zombie nobody reaped."""
    return psutil.pid_exists(pid)


def _server_children() -> list[psutil.Process]:
    """Running stand-in server processes below this test process (unreaped ones are caught by `_alive`); the
    zygotes that fork them are kept between attempts and are not servers."""
    out = []
    zygotes = zygote_pids()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in zygotes and str(SERVER) in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _new_pids(tb: dict[str, Path], before: set[str]) -> list[int]:
    return [int(p.stem) for p in tb["pids"].glob("*.pid") if p.name not in before]


# -- the format: parsing, merging, hydration, errors (no server) ------------------------------------


def test_deep_merge_follows_thinkingbox():
    a = {"my_list": [1, 2, 3], "my_dict": {"a": 1, "b": 2}, "x": {"y": 1}}
    b = {"my_list": [4, 5], "my_dict": {"b": 11, "c": 12}, "x": 5}
    assert deep_merge(a, b) == {"my_list": [1, 2, 3, 4, 5], "my_dict": {"a": 1, "b": 11, "c": 12}, "x": 5}
    assert a["my_list"] == [1, 2, 3]  # inputs untouched
    assert merge_init({"s": {"k": [1]}, "t": {}}, {"s": {"k": [2]}, "t": {"z": 1}, "u": {"w": 2}}) == {
        "s": {"k": [1, 2]},
        "t": {"z": 1},
        "u": {"w": 2},
    }


def test_hydration(tb):
    pairs = load_thinkingbox(tb["dataset"], tb["list_main"])
    assert [t.id for t, _ in pairs] == ["standin_bank_group1.py:test_transfer", "standin_bank_group1.py:test_ticket"]
    (transfer, domain), (ticket, _) = pairs
    assert isinstance(domain, TbDomain) and domain.name == "standin_bank" and transfer.domain == "standin_bank"
    assert transfer.instruction.startswith("Hi, I am Carol") and "accountant" in transfer.user.persona
    assert [(c.tool, c.args) for c in transfer.gold] == [
        ("get_account", {"account_id": "A1"}),
        ("transfer", {"from_id": "A1", "to_id": "A2", "amount": 30}),
    ]
    assert transfer.rubrics == [] and ticket.rubrics == ["Does the reply tell the customer that a ticket was opened?"]
    case = domain.cases[transfer.id]
    cfg = case.init_config("standin_bank")
    assert [r["id"] for r in cfg["data_patch"]["accounts"]] == ["A1", "A2", "A3"]  # scenario rows, then the test's
    assert cfg["sources"] and "sources" not in case.init_config("standin_bank", no_sources=True)
    assert case.tools == ("get_account", "transfer", "create_ticket") and case.check == "benchmark"
    assert transfer.patch["standin_bank/accounts"][-1]["id"] == "A3"
    assert domain.system_prompt().startswith("You are an AI Agent") and domain.system_prompt().endswith("Current date: 2026-01-01")
    # the whole dataset: skip-tagged cases are left out; a file with arbitrary Python checks is refused without the framework
    with pytest.raises(TaskFileError, match="arbitrary Python.*test list"):
        load_thinkingbox(tb["dataset"], allow_python=False)
    everything = load_thinkingbox(tb["dataset"], allow_python=True)
    assert sorted(t.id for t, _ in everything) == [
        "standin_bank_custom.py:test_custom_broken",
        "standin_bank_custom.py:test_custom_check",
        "standin_bank_custom.py:test_custom_judged",
        "standin_bank_group1.py:test_ticket",
        "standin_bank_group1.py:test_transfer",
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda ds, lst: (ds / "scenario" / "standin_bank.yaml").unlink(), "scenario 'standin_bank' not found"),
        (lambda ds, lst: lst.write_text(yaml.safe_dump(["standin_bank_group1.py:test_nope"])), "has no test case 'test_nope'"),
        (lambda ds, lst: lst.write_text(yaml.safe_dump(["nothere.py:test_x"])), "no test file 'nothere.py'"),
        (lambda ds, lst: lst.write_text(yaml.safe_dump(["no-colon"])), "not a 'file.py:test_name' selector"),
        (lambda ds, lst: lst.write_text(yaml.safe_dump(["standin_bank_group1.py:test_later"])), "tagged skip"),
        (
            lambda ds, lst: (ds / "test_case" / "standin_bank" / "standin_bank_group1.py").write_text(
                GROUP1.replace("query: My card", "query: [My card")
            ),
            "YAML of test test_ticket is not valid",
        ),
        (
            lambda ds, lst: (ds / "test_case" / "standin_bank" / "standin_bank_group1.py").write_text(
                GROUP1.replace("query: My card", "qeury: My card")
            ),
            "unknown key 'qeury'",
        ),
        (lambda ds, lst: (ds / "scenario" / "standin_bank.yaml").write_text("world_state: {}\ntools: oops\n"), "field 'tools'"),
        (
            lambda ds, lst: (ds / "test_case" / "standin_bank" / "standin_bank_group1.py").write_text(
                GROUP1.replace("def test_ticket(x: TestContext, judge: Judge):", "def test_ticket(x, judge, mailbox):")
            ),
            r"fixtures \(mailbox\)",
        ),
        (
            lambda ds, lst: (ds / "scenario" / "standin_bank.yaml").write_text(
                yaml.safe_dump({**SCENARIO, "tools": [{"name": "transfer", "direct_response": "Done."}]})
            ),
            r"field 'tools\[0\].direct_response'",
        ),
    ],
)
def test_format_errors_name_file_and_field(tb, tmp_path, edit, message):
    import shutil

    ds = tmp_path / "dataset"
    shutil.copytree(tb["dataset"], ds)
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_group1.py:test_transfer", "standin_bank_group1.py:test_ticket"]))
    edit(ds, lst)
    with pytest.raises(TaskFileError, match=message):
        load_thinkingbox(ds, lst)


def test_noisy_agent_corrupts_thinkingbox_gold_deterministically(tb):
    ((task, domain),) = load_thinkingbox(tb["dataset"], tb["list_transfer"])
    runs = [[(c["tool"], c["args"]) for c in make_scripted_agent("scripted:noisy:1.0", task, domain, attempt=a).calls] for a in range(6)]
    gold = [(c.tool, c.args) for c in task.gold]
    assert all(r != gold for r in runs)  # p = 1: every call dropped, changed or duplicated
    assert runs == [[(c["tool"], c["args"]) for c in make_scripted_agent("scripted:noisy:1.0", task, domain, attempt=a).calls] for a in range(6)]
    changed = [args for r in runs for tool, args in r if tool == "transfer" and args != gold[1][1]]
    assert changed and all(sum(args[k] != v for k, v in gold[1][1].items()) == 1 for args in changed)  # one argument changed


def test_hash_verdicts_from_effects():
    from groundstate.worlds.thinkingbox.grading import MAX_DIFF_ITEMS, hash_verdict

    same = hash_verdict({"a": {"result_db_hash": "x", "golden_db_hash": "x", "diff": []}, "b": {"result_db_hash": "y", "golden_db_hash": "y"}})
    assert same.reward == 1 and same.state_reward == 1 and same.diff == []
    items = [{"path": f"t[{i}].v", "type": "value mismatch", "result": i, "golden": -i} for i in range(MAX_DIFF_ITEMS + 5)]
    differ = hash_verdict({"a": {"result_db_hash": "x", "golden_db_hash": "x"}, "b": {"result_db_hash": "y", "golden_db_hash": "z", "diff": items}})
    assert differ.reward == 0 and len(differ.diff) == MAX_DIFF_ITEMS and differ.diff[0] == {"server": "b", **items[0]}
    assert f"({MAX_DIFF_ITEMS + 5} difference(s), the first {MAX_DIFF_ITEMS} in the diff)" in differ.reasons[0]
    broken = hash_verdict({"a": {"result_db_state": {}}})
    assert broken.system_error and "without result_db_hash and golden_db_hash" in broken.system_error


def test_servers_file_errors(tb, tmp_path):
    from groundstate.worlds.thinkingbox import load_servers

    bad = tmp_path / "servers.yaml"
    bad.write_text(yaml.safe_dump({"servers": {"standin_bank": {"type": "mcp-http", "command": ["x"]}}}))
    with pytest.raises(TaskFileError, match=r"servers\.yaml: field 'servers.standin_bank.type'"):
        load_servers(bad)
    specs = load_servers(tb["servers_ok"])
    assert specs["standin_bank"].command == (sys.executable, str(SERVER))


# -- attempts against the stand-in server ------------------------------------------------------------


def test_gold_passes_noop_and_perturbed_fail_and_no_server_outlives_its_attempt(tb):
    ((task, domain),) = tb_pairs(tb, "transfer")
    before = {p.name for p in tb["pids"].iterdir()}
    gold = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert gold.verdict.reward == 1 and gold.verdict.system_error is None, gold.verdict.reasons
    assert gold.trajectory.messages[0]["content"] == domain.system_prompt()
    noop = tb_play(task, domain, make_scripted_agent("scripted:noop", task, domain))
    assert noop.verdict.reward == 0 and noop.verdict.system_error is None
    calls = [c.model_dump() for c in task.gold]
    calls[1]["args"]["amount"] = 31
    perturbed = tb_play(task, domain, ScriptedAgent(calls))
    assert perturbed.verdict.reward == 0 and "differs from the golden hash" in perturbed.verdict.reasons[0]
    assert {(d["path"], d["result"], d["golden"]) for d in perturbed.verdict.diff} == {
        ("accounts[0].balance", 69, 70),
        ("accounts[1].balance", 51, 50),
    }
    assert all(d["server"] == "standin_bank" for d in perturbed.verdict.diff)
    pids = _new_pids(tb, before)
    assert len(pids) == 3 and not [p for p in pids if _alive(p)] and not _server_children()
    assert all((tb["pids"] / f"{p}.teardown").exists() for p in pids)  # each server was torn down before it was stopped


def test_reserved_and_unlisted_tools_are_hidden_and_refused(tb):
    ((task, domain),) = tb_pairs(tb, "transfer")
    agent = ScriptedAgent(
        [
            {"tool": "delete_account", "args": {"account_id": "A1"}},
            {"tool": "__reserved__init", "args": {"config": {}}},
            *[c.model_dump() for c in task.gold],
        ]
    )
    out = tb_play(task, domain, agent)
    schemas = {t["function"]["name"]: t["function"] for t in asyncio.run(_schemas(task, domain))}
    assert set(schemas) == {"get_account", "transfer", "create_ticket"}
    assert schemas["create_ticket"]["description"] == "Open a support ticket (for lost or stolen cards too)."  # scenario overrides
    assert schemas["transfer"]["parameters"]["properties"]["amount"]["description"] == "Whole currency units."
    assert schemas["get_account"]["description"] == "Look up a bank account by id: owner and balance."
    assert [c.ok for c in out.trajectory.tool_calls] == [False, False, True, True]
    assert "unknown tool 'delete_account'" in out.trajectory.tool_calls[0].result
    assert out.verdict.reward == 1  # the refused calls changed nothing


async def _schemas(task, domain) -> list[dict[str, Any]]:
    env = await domain.open_environment(task, make_backend("sqlite"), EpisodeLimits())
    try:
        return env.tool_schemas()
    finally:
        await env.close()


def test_rubric_task_is_unjudged_without_a_judge_and_judged_with_one(tb):
    from groundstate.grading.judge import Judge

    (_, _), (task, domain) = tb_pairs(tb)
    out = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.unjudged and out.verdict.reward is None and out.verdict.state_reward == 1
    assert "unjudged" in out.verdict.reasons[-1]

    class Completions:  # the OpenAI client surface the judge uses, answering as told
        def __init__(self, answer: str):
            self.answer, self.asked = answer, []

        def create(self, **kw):
            from types import SimpleNamespace

            self.asked.append(kw["messages"][-1]["content"])
            msg = SimpleNamespace(content=self.answer, tool_calls=None, reasoning_content=None)  # as the OpenAI client shapes a message
            return SimpleNamespace(choices=[SimpleNamespace(message=msg, finish_reason="stop")], usage=None)

    from groundstate.worlds.thinkingbox.grading import grade_case

    effects = {"standin_bank": {"result_db_hash": "h", "golden_db_hash": "h", "diff": []}}
    for answer, reward in (("Yes.", 1), ("no", 0)):
        completions = Completions(answer)
        client = type("Client", (), {"chat": type("Chat", (), {"completions": completions})()})()
        v = asyncio.run(grade_case(task, domain.cases[task.id], effects, out.trajectory, Judge("openai:judge@http://x", client=client)))
        assert v.reward == reward and not v.unjudged and "ticket was opened" in completions.asked[0]


def test_server_crash_at_start_and_mid_episode_are_system_errors(tb):
    before = {p.name for p in tb["pids"].iterdir()}
    ((task, domain),) = tb_pairs(tb, "transfer", servers="crash_start")
    out = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.system_error and "did not start" in out.verdict.system_error and out.verdict.reward is None
    assert "ExceptionGroup" not in out.verdict.system_error
    ((task, domain),) = tb_pairs(tb, "transfer", servers="crash_transfer")
    out = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.system_error and out.verdict.reward is None
    assert "server 'standin_bank' failed during transfer" in out.verdict.system_error
    pids = _new_pids(tb, before)
    assert len(pids) == 1 and not _alive(pids[0])  # the start crash never wrote one; the mid-episode one is gone


def test_sources_need_typesense_or_tb_no_sources(tb):
    ((task, domain),) = tb_pairs(tb, "transfer", no_sources=False)
    out = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.system_error and "Typesense" in out.verdict.system_error


def test_custom_python_checks_are_refused_without_the_framework(tb):
    with pytest.raises(TaskFileError, match="arbitrary Python"):
        load_thinkingbox(tb["dataset"], tb["list_custom"], allow_python=False)


# -- concurrency, the runner and everything that reads results --------------------------------------


def test_concurrent_attempts_get_their_own_server_process_and_the_same_verdict(tb):
    ((task, domain),) = tb_pairs(tb, "transfer")
    before = {p.name for p in tb["pids"].iterdir()}
    n = 3
    seen_alive: list[list[int]] = []

    class TogetherAgent(ScriptedAgent):
        """The gold agent, whose first turn waits until every attempt's environment is open."""

        def __init__(self, barrier: asyncio.Barrier):
            super().__init__([c.model_dump() for c in task.gold])
            self.barrier = barrier

        async def act(self, conversation, tools):
            if self._next == 0:
                await self.barrier.wait()
                seen_alive.append([p for p in _new_pids(tb, before) if _alive(p)])
            return await super().act(conversation, tools)

    async def attempts():
        be, barrier = make_backend("sqlite"), asyncio.Barrier(n)
        return await asyncio.gather(*(play(task, domain, TogetherAgent(barrier), ScriptedUser([]), backend=be) for _ in range(n)))

    outs = asyncio.run(attempts())
    assert [len(alive) for alive in seen_alive] == [n] * n  # all n servers were up at once
    pids = _new_pids(tb, before)
    assert len(set(pids)) == n and not [p for p in pids if _alive(p)]
    assert {json.dumps(o.verdict.to_json(), sort_keys=True) for o in outs} == {json.dumps(outs[0].verdict.to_json(), sort_keys=True)}
    assert outs[0].verdict.reward == 1


@pytest.fixture(scope="module")
def runs(tb, tmp_path_factory) -> dict[str, Path]:
    """`groundstate run` of the no-op and the gold agent, k=2, concurrently, on the two cases of the main list."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    out = tmp_path_factory.mktemp("runs")
    paths = {}
    selector = f"thinkingbox:{tb['dataset']}::{tb['list_main']}"
    for agent in ("noop", "gold"):
        paths[agent] = out / f"{agent}.jsonl"
        r = CliRunner().invoke(
            app,
            [
                "run",
                "--agent",
                f"scripted:{agent}",
                "--tasks",
                selector,
                "--k",
                "2",
                "--concurrency",
                "4",
                "--tb-servers",
                str(tb["servers_ok"]),
                "--tb-no-sources",
                "--out",
                str(paths[agent]),
            ],
        )
        assert r.exit_code == 0, r.output
    return paths


def test_run_records_metrics_and_compare(tb, runs):
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.records import read_records

    gold = read_records(runs["gold"])
    assert sorted((r.task_id, r.attempt) for r in gold) == [(f"standin_bank_group1.py:test_{t}", a) for t in ("ticket", "transfer") for a in (0, 1)]
    by_task = {(r.task_id.split(":")[1], r.attempt): r for r in gold}
    assert all(by_task[("test_transfer", a)].reward == 1 for a in (0, 1))
    assert all(by_task[("test_ticket", a)].unjudged and by_task[("test_ticket", a)].reward is None for a in (0, 1))
    assert {r.domain for r in gold} == {"standin_bank"} and all(r.system_error is None for r in gold)
    assert not [p for p in tb["pids"].glob("*.pid") if _alive(int(p.stem))]  # every server of both runs is gone
    runner = CliRunner()
    m = json.loads(runner.invoke(app, ["metrics", str(runs["gold"]), "--json"]).stdout)
    assert m["unjudged"] == 2 and m["clean_attempts"] == 2 and m["pass_at_1"] == 1.0 and m["by_domain"]["standin_bank"]["tasks"] == 1
    c = runner.invoke(app, ["compare", str(runs["noop"]), str(runs["gold"]), "--json"])
    assert c.exit_code == 0, c.output
    lift = json.loads(c.stdout)["metrics"]["pass_at_1"]
    assert (lift["base"], lift["candidate"]) == (0.0, 1.0)
    html = runs["gold"].parent / "report.html"
    r = runner.invoke(app, ["report", str(runs["noop"]), "--baseline", str(runs["gold"]), "-o", str(html)])
    assert r.exit_code == 0, r.output
    assert "accounts[0].balance" in html.read_text()  # the servers' diff reaches the report


def test_select_excludes_thinkingbox_benchmark_and_its_split_trains(tb, runs, tmp_path):
    from typer.testing import CliRunner

    from groundstate.audits.overlap import build_exclude_set
    from groundstate.cli import app

    ex = build_exclude_set([f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}"])
    assert "standin_bank_group1.py:test_transfer" in ex.ids
    r = CliRunner().invoke(
        app,
        [
            "select",
            str(runs["gold"]),
            "--out",
            str(tmp_path / "sel"),
            "--min-clean-runs",
            "1",
            "--bands",
            "too_hard,hard,medium,easy,too_easy",
            "--exclude",
            f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = {row["task_id"]: row for row in map(json.loads, (tmp_path / "sel" / "selection.jsonl").read_text().splitlines())}
    assert rows["standin_bank_group1.py:test_transfer"]["decision"] == "excluded"
    # a selection's train/val lists are lists of `file.py:test_name` ids: ThinkingBox test lists for --train / --tasks
    train = tmp_path / "train.yaml"
    train.write_text(yaml.safe_dump(["standin_bank_group1.py:test_transfer"]))
    pairs = select_tasks(f"thinkingbox:{tb['dataset']}::{train}", tb_servers=tb["servers_ok"], tb_no_sources=True)
    assert [t.id for t, _ in pairs] == ["standin_bank_group1.py:test_transfer"]


def test_grpo_groups_get_thinkingbox_rewards(tb):
    """GRPO's group sampler rolls out through the same attempt path: a group of right and wrong transfers is informative."""
    from groundstate.train.grpo import GroupSampler

    pairs = tb_pairs(tb, "transfer")
    ((task, _),) = pairs
    right = [c.model_dump() for c in task.gold]
    wrong = [right[0], {**right[1], "args": {**right[1]["args"], "amount": 3}}]

    class Policy:  # the surface GroupSampler reads from a policy: agents with their token records
        def __init__(self):
            self.n = 0

        def agent(self):
            self.n += 1
            agent = ScriptedAgent(right if self.n % 2 else wrong)
            agent.prompt_ids = agent.completion_ids = agent.env_mask = agent.logprobs = []
            agent.truncated = False
            return agent

    be = make_backend("sqlite")
    groups, stats = asyncio.run(GroupSampler(pairs, Policy(), be, group_size=2, refill_ratio=0).step(pairs))
    assert sorted(r.reward for r in groups[0]) == [0.0, 1.0] and stats.informative == 1 and stats.system_error_groups == 0


@pytest.mark.slow
def test_cli_needs_servers_and_lints_thinkingbox_tasks(tb, tmp_path):
    from typer.testing import CliRunner

    from groundstate.cli import app

    selector = f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}"
    r = CliRunner().invoke(app, ["run", "--agent", "scripted:gold", "--tasks", selector, "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code == 2 and "--tb-servers" in r.output
    r = CliRunner().invoke(app, ["probe", "--agent", "scripted:gold", "--tasks", selector, "--out", str(tmp_path / "p.jsonl")])
    assert r.exit_code == 2 and "--tb-servers" in r.output
    listed = CliRunner().invoke(app, ["tasks", "list", "--tasks", selector, "--json"])
    assert json.loads(listed.stdout)[0]["id"] == "standin_bank_group1.py:test_transfer"
    r = CliRunner().invoke(
        app,
        [
            "tasks",
            "lint",
            "--tasks",
            selector,
            "--tb-servers",
            str(tb["servers_ok"]),
            "--tb-no-sources",
            "--json",
            "--out",
            str(tmp_path / "lint.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "lint.json").read_text())
    t = report["per_task"][0]
    assert t["gold_pass"] and t["noop_fail"] and not t["problems"]
    outcomes = {m["description"]: m["outcome"] for m in t["mutants"]}
    assert outcomes["drop gold[0] get_account"] == "no-op"  # a read: the state digest is the same before and after it
    assert outcomes["drop gold[1] transfer"] == "killed" and outcomes["duplicate gold[1] transfer"] == "killed"
    assert outcomes["change gold[1] transfer.amount: 30 -> 31"] == "killed"
    assert report["mutants_killed"] == report["mutants"]


def test_lint_labels_refused_and_noop_mutants_of_bridged_tasks_never_survivors(tb, tmp_path):
    """#37 item 4: with no tool marked read-only (as the benchmark servers mark none), a mutant whose call the server
    refused with `{"error": ...}` text is *refused*, one whose call left the servers' state digest as it was (a read, or
    a repeated read) is a *no-op*; neither counts, and the checks kill every mutant that changed the state. Before:
    all of them were survivors and the kill rate understated the checks."""
    from groundstate.audits.lint import lint_task

    spec = yaml.safe_load(tb["servers_ok"].read_text())
    spec["servers"]["standin_bank"]["env"]["TB_STANDIN_UNMARKED"] = "1"
    (tmp_path / "servers_unmarked.yaml").write_text(yaml.safe_dump(spec))
    ((task, domain),) = tb_pairs({**tb, "servers_unmarked": tmp_path / "servers_unmarked.yaml"}, "transfer", "unmarked")
    report = lint_task(task, domain, make_backend("sqlite"))
    assert report.gold_pass and report.noop_fail and not report.problems, report.problems
    outcomes = {m.description: m.outcome for m in report.mutants}
    assert outcomes["drop gold[0] get_account"] == "no-op" and outcomes["duplicate gold[0] get_account"] == "no-op"
    assert [o for d, o in outcomes.items() if d.startswith("change gold[0] get_account.account_id")] == ["refused"]
    assert [o for d, o in outcomes.items() if d.startswith("change gold[1] transfer.from_id")] == ["killed"]  # refused, and fails
    assert outcomes["drop gold[1] transfer"] == outcomes["duplicate gold[1] transfer"] == "killed"
    assert "survived" not in outcomes.values() and report.killed == report.counted > 0
    reasons = {m.description: m.reason for m in report.mutants}
    assert "state digest is the same" in reasons["drop gold[0] get_account"]


def test_custom_python_checks_run_in_the_thinkingbox_worker_when_it_is_importable(tb, monkeypatch):
    from groundstate.grading.judge import Judge
    from groundstate.worlds.thinkingbox.grading import grade_case

    monkeypatch.syspath_prepend(str(FRAMEWORK))
    monkeypatch.setenv("PYTHONPATH", str(FRAMEWORK))
    ((task, domain),) = tb_pairs(tb, "custom")
    assert domain.cases[task.id].check == "python"
    gold = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert gold.verdict.reward == 1 and gold.verdict.system_error is None, gold.verdict.reasons
    noop = tb_play(task, domain, make_scripted_agent("scripted:noop", task, domain))
    assert noop.verdict.reward == 0 and noop.verdict.system_error is None
    assert "result_db_state" in noop.verdict.reasons[0]  # the failing assertion's line
    others = {t.id.split(":")[1]: (t, d) for t, d in load_thinkingbox(tb["dataset"], allow_python=True)}
    effects = {"standin_bank": {"result_db_hash": "h", "golden_db_hash": "h"}}
    t, d = others["test_custom_judged"]
    v = asyncio.run(grade_case(t, d.cases[t.id], effects, gold.trajectory))
    assert v.unjudged and v.reward is None
    v = asyncio.run(grade_case(t, d.cases[t.id], effects, gold.trajectory, Judge("openai:judge-model@http://judge.invalid/v1")))
    assert v.system_error and "http://judge.invalid/v1/chat/completions" in v.system_error  # ThinkingBox got our judge
    t, d = others["test_custom_broken"]
    v = asyncio.run(grade_case(t, d.cases[t.id], effects, gold.trajectory))
    assert v.system_error and "KeyError" in v.system_error


def test_openai_agent_user_and_judge_over_http(tb, tmp_path):
    """The benchmark recipe end to end with scripted OpenAI-compatible endpoints over HTTP: the agent sees the
    dataset's prompt and only the scenario's tools, the simulated user the query, the judge the yes/no rubric."""
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.records import read_records

    ticket_list = tmp_path / "ticket.yaml"
    ticket_list.write_text(yaml.safe_dump(["standin_bank_group1.py:test_ticket"]))
    reply = "I have opened a ticket about your stolen card. <DONE>"
    with (
        OpenAIStub([tool_call("create_ticket", {"account_id": "A2", "subject": "Stolen card"}), text(reply)]) as agent,
        OpenAIStub([text("###STOP###")]) as user,
        OpenAIStub([text("Yes")]) as judge,
    ):
        out = tmp_path / "results.jsonl"
        r = CliRunner().invoke(
            app,
            [
                "run",
                "--tasks",
                f"thinkingbox:{tb['dataset']}::{ticket_list}",
                "--tb-servers",
                str(tb["servers_ok"]),
                "--tb-no-sources",
                "--agent",
                f"openai:agent-model@{agent.base_url}",
                "--user",
                f"openai:user-model@{user.base_url}",
                "--judge",
                f"openai:judge-model@{judge.base_url}",
                "--out",
                str(out),
            ],
        )
        assert r.exit_code == 0, r.output
        (record,) = read_records(out)
        first = agent.requests[0]["body"]
        judged = judge.requests[0]["body"]["messages"][-1]["content"]
        simulated = json.dumps(user.requests[0]["body"]["messages"])
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["create_ticket", "get_account", "transfer"]
    assert first["messages"][0] == {
        "role": "system",
        "content": "You are an AI Agent. Help users achieve their objectives.\n\nCurrent date: 2026-01-01",
    }
    assert "My card for account A2 was stolen" in simulated
    assert "Does the reply tell the customer that a ticket was opened?" in judged and "opened a ticket about your stolen card" in judged
    assert record.system_error is None and record.reward == 1 and not record.unjudged, record.verdict
    assert record.finish_reason == "user_done" and [c.name for c in record.trajectory.tool_calls] == ["create_ticket"]


FASTMCP_PYTHON = os.environ.get("GROUNDSTATE_TB_FASTMCP_PYTHON")


@pytest.mark.skipif(not FASTMCP_PYTHON, reason="set GROUNDSTATE_TB_FASTMCP_PYTHON to an interpreter that has fastmcp>=3,<4")
def test_a_fastmcp3_server_like_the_benchmarks(tb, tmp_path):
    """The benchmark servers are fastmcp 3 servers in their own environment: the same stand-in, served by fastmcp."""
    servers = tmp_path / "servers.yaml"
    servers.write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "standin_bank": {
                        "type": "mcp-process",
                        "command": [FASTMCP_PYTHON, str(SERVER)],
                        "env": {"TB_STANDIN_FRAMEWORK": "fastmcp", "TB_STANDIN_PID_DIR": str(tb["pids"])},
                    }
                }
            }
        )
    )
    ((task, domain),) = select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}", tb_servers=servers, tb_no_sources=True)
    before = {p.name for p in tb["pids"].iterdir()}
    gold = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert gold.verdict.reward == 1, gold.verdict.reasons
    assert [(c.name, c.write) for c in gold.trajectory.tool_calls] == [("get_account", False), ("transfer", True)]
    noop = tb_play(task, domain, make_scripted_agent("scripted:noop", task, domain))
    assert noop.verdict.reward == 0 and len(noop.verdict.diff) == 2
    pids = _new_pids(tb, before)
    assert len(pids) == 2 and not [p for p in pids if _alive(p)]


def test_select_checks_probed_thinkingbox_tasks_by_content_with_domain_path(tb, runs, tmp_path):
    """A benchmark case copied under another file name is caught by content once `select` can load the probed
    tasks' definitions (`--domain thinkingbox:DIR`); by id alone it slips through."""
    import shutil

    from typer.testing import CliRunner

    from groundstate.cli import app

    bench = tmp_path / "bench_dataset"
    shutil.copytree(tb["dataset"], bench)
    src = bench / "test_case" / "standin_bank" / "standin_bank_group1.py"
    src.rename(bench / "test_case" / "renamed_copy.py")  # ThinkingBox finds test_case/<file>.py first
    renamed = tmp_path / "bench.yaml"
    renamed.write_text(yaml.safe_dump(["renamed_copy.py:test_transfer"]))
    probed = "standin_bank_group1.py:test_transfer"

    def decision(extra):
        out = tmp_path / f"sel{len(extra)}"
        r = CliRunner().invoke(
            app,
            [
                "select",
                str(runs["gold"]),
                "--out",
                str(out),
                "--min-clean-runs",
                "1",
                "--bands",
                "too_hard,hard,medium,easy,too_easy",
                "--exclude",
                f"thinkingbox:{bench}::{renamed}",
                *extra,
            ],
        )
        assert r.exit_code == 0, r.output
        rows = {row["task_id"]: row for row in map(json.loads, (out / "selection.jsonl").read_text().splitlines())}
        return rows[probed]["decision"]

    assert decision([]) != "excluded"  # id only: a different id
    assert decision(["--domain", f"thinkingbox:{tb['dataset']}::{tb['list_main']}"]) == "excluded"  # same content as a benchmark case


@pytest.mark.slow
def test_ray_runs_thinkingbox_tasks_like_the_local_runner(tb, runs, tmp_path):
    """`run --ray`: actors load the same cases from the dataset (never pickled), start one server per attempt,
    and give the same verdicts as the local run; no server outlives its attempt."""
    pytest.importorskip("ray")
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.records import read_records

    before = {p.name for p in tb["pids"].iterdir()}
    path = tmp_path / "ray.jsonl"
    selector = f"thinkingbox:{tb['dataset']}::{tb['list_main']}"
    r = CliRunner().invoke(
        app,
        [
            "run",
            "--agent",
            "scripted:gold",
            "--tasks",
            selector,
            "--k",
            "2",
            "--tb-servers",
            str(tb["servers_ok"]),
            "--tb-no-sources",
            "--out",
            str(path),
            "--ray",
            "local",
            "--ray-cpus",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output

    def essence(recs):
        return {(x.task_id, x.attempt): (x.reward, x.unjudged, x.system_error) for x in recs}

    assert essence(read_records(path)) == essence(read_records(runs["gold"]))
    pids = _new_pids(tb, before)
    assert len(pids) == 4 and not [p for p in pids if _alive(p)]


def test_thinkingbox_tasks_travel_by_reference_to_other_processes(tb):
    """Ray actors and verl's agent-loop workers get `(domain reference, task id)`, never pickled objects: the
    reference of a ThinkingBox case (dataset, test list, servers, --tb-no-sources) resolves, in a fresh
    resolver, to the same task and a domain that plays it to the same verdict; verl's parquet rows carry it."""
    from groundstate.train.verl.dataset import task_rows
    from groundstate.worlds.refs import TaskResolver

    pairs = tb_pairs(tb, "transfer")
    ((task, domain),) = pairs
    ref = domain.ref()
    [row] = task_rows(pairs)
    assert row["extra_info"]["domain"] == ref and row["extra_info"]["task_id"] == task.id
    task2, domain2 = TaskResolver().resolve(ref, task.id)
    assert domain2 is not domain and task2.fingerprint() == task.fingerprint() and domain2.content_hash == domain.content_hash
    assert domain2.servers_file == domain.servers_file and domain2.no_sources == domain.no_sources
    here = tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    there = tb_play(task2, domain2, make_scripted_agent("scripted:gold", task2, domain2))
    assert here.verdict.reward == there.verdict.reward == 1
    with pytest.raises(KeyError, match="not among the ThinkingBox cases"):
        TaskResolver().resolve(ref, "standin_bank_group1.py:test_nope")


# -- hardening (#20): ids, paths, what is checked, bounded grading, server processes --------------------


def _dataset_copy(tb, tmp_path) -> Path:
    import shutil

    ds = tmp_path / "dataset"
    shutil.copytree(tb["dataset"], ds)
    return ds


def test_same_file_name_in_two_folders_is_refused_never_merged(tb, tmp_path):
    ds = _dataset_copy(tb, tmp_path)
    for folder, amount in (("a", 30), ("b", 7)):
        (ds / "test_case" / folder).mkdir()
        (ds / "test_case" / folder / "dup.py").write_text(GROUP1.replace("amount: 30}", f"amount: {amount}}}"))
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["a/dup.py:test_transfer", "b/dup.py:test_transfer"]))
    with pytest.raises(
        TaskFileError,
        match=r"list\.yaml: field '\[1\]'.*b/dup.py:test_transfer and entry a/dup.py:test_transfer "
        r"are two cases with the same id dup.py:test_transfer",
    ):
        load_thinkingbox(ds, lst)
    with pytest.raises(TaskFileError, match=r"dup.py: task 'dup.py:test_transfer'.*duplicate test case id"):
        load_thinkingbox(ds, allow_python=True)
    # one of them alone loads with its own gold; the same file named twice is one case
    lst.write_text(yaml.safe_dump(["b/dup.py:test_transfer", "b/dup.py:test_transfer"]))
    ((task, domain),) = load_thinkingbox(ds, lst)
    assert task.gold[1].args["amount"] == 7 and domain.cases[task.id].file.parent.name == "b"


@pytest.mark.parametrize(
    "entry",
    [
        "../../outside/x.py:test_transfer",
        "/etc/passwd:test_x",
        "{outside}:test_transfer",
        "link.py:test_transfer",
        "../scenario/standin_bank.yaml:test_x",
    ],
)
def test_test_list_entries_and_symlinks_outside_test_case_are_refused_unread(tb, tmp_path, entry):
    ds = _dataset_copy(tb, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text(GROUP1)
    (ds / "test_case" / "link.py").symlink_to(outside / "x.py")
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump([entry.format(outside=outside / "x.py")]))
    with pytest.raises(TaskFileError, match=r"list\.yaml: field '\[0\]'.*is not a \.py file inside .*test_case") as e:
        load_thinkingbox(ds, lst)
    assert "valid Python" not in str(e.value)


def test_a_symlinked_test_file_pointing_outside_fails_the_whole_dataset_load(tb, tmp_path):
    ds = _dataset_copy(tb, tmp_path)
    (tmp_path / "x.py").write_text(GROUP1)
    (ds / "test_case" / "standin_bank" / "evil.py").symlink_to(tmp_path / "x.py")
    with pytest.raises(TaskFileError, match="evil.py: resolves outside"):
        load_thinkingbox(ds, allow_python=True)
    # a scenario name that climbs out of scenario/ is refused too
    (ds / "test_case" / "standin_bank" / "evil.py").unlink()
    (ds / "test_case" / "standin_bank" / "standin_bank_group1.py").write_text(GROUP1.replace("scenario: standin_bank", "scenario: ../agent/think"))
    with pytest.raises(TaskFileError, match="is not a file inside"):
        load_thinkingbox(ds, tb["list_transfer"])


@pytest.mark.parametrize(
    "effects, message",
    [
        ({}, "no server returned effects"),
        ({"s": {"result_db_hash": "", "golden_db_hash": ""}}, "malformed effects.*result_db_hash=''.*golden_db_hash=''"),
        ({"s": {"result_db_hash": " ", "golden_db_hash": " "}}, "malformed effects"),
        ({"s": {"result_db_hash": "ab12", "golden_db_hash": "ab12\n"}}, r"malformed effects \(golden_db_hash="),
        ({"s": {"result_db_hash": "ab12", "golden_db_hash": "ab12"}, "t": {"result_db_hash": "", "golden_db_hash": ""}}, "server 't'"),
        ({"s": {"result_db_hash": 5, "golden_db_hash": 5}}, "without result_db_hash and golden_db_hash"),
    ],
)
def test_empty_or_malformed_effects_are_system_errors_never_a_pass(effects, message):
    from groundstate.worlds.thinkingbox.grading import hash_verdict

    v = hash_verdict(effects)
    assert v.reward is None and v.system_error and v.state_reward is None
    assert __import__("re").search(message, v.system_error), v.system_error


def test_a_case_with_no_server_to_check_is_a_load_error(tb, tmp_path):
    ds = _dataset_copy(tb, tmp_path)
    (ds / "scenario" / "standin_bank.yaml").write_text(yaml.safe_dump({**SCENARIO, "world_state": {}}))
    ds_file = ds / "test_case" / "standin_bank" / "standin_bank_group1.py"
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_group1.py:test_later"]))
    ds_file.write_text(GROUP1.replace("tags: [skip]", "tags: []"))
    with pytest.raises(TaskFileError, match=r"test_later': field 'init': neither scenario 'standin_bank' \(world_state\) nor the test"):
        load_thinkingbox(ds, lst)
    # a test that names its server in init still loads on the empty world_state
    assert [t.id for t, _ in load_thinkingbox(ds, tb["list_transfer"])] == ["standin_bank_group1.py:test_transfer"]


RETURNS = HELPERS + "".join(
    f'''

def test_returns_{name}(x: TestContext, judge: Judge):
    """!
    query: Say hello.
    """
    return {value}
'''
    for name, value in (
        ("nan", "float('nan')"),
        ("inf", "float('inf')"),
        ("seven", "7"),
        ("half", "0.5"),
        ("one", "1"),
        ("true", "True"),
        ("zero", "0"),
        ("false", "False"),
        ("none", "None"),
    )
)


@pytest.mark.parametrize(
    "name, reward, error",
    [
        ("nan", None, "reward nan"),
        ("inf", None, "reward inf"),
        ("seven", None, "reward 7.0"),
        ("half", None, "reward 0.5"),
        ("one", 1, None),
        ("true", 1, None),
        ("zero", 0, None),
        ("false", 0, None),
        ("none", 1, None),
    ],
)
def test_framework_rewards_other_than_exactly_1_or_0_are_system_errors(tb, tmp_path, monkeypatch, name, reward, error):
    from groundstate.types import Trajectory
    from groundstate.worlds.thinkingbox.grading import grade_case

    monkeypatch.syspath_prepend(str(FRAMEWORK))
    monkeypatch.setenv("PYTHONPATH", str(FRAMEWORK))
    ds = _dataset_copy(tb, tmp_path)
    (ds / "test_case" / "standin_bank_returns.py").write_text(RETURNS)
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump([f"standin_bank_returns.py:test_returns_{name}"]))
    ((task, domain),) = load_thinkingbox(ds, lst, allow_python=True)
    effects = {"standin_bank": {"result_db_hash": "h", "golden_db_hash": "h"}}
    v = asyncio.run(grade_case(task, domain.cases[task.id], effects, Trajectory(messages=[])))
    assert v.reward == reward and (v.system_error is None) == (error is None), v.reasons
    if error:
        assert error in v.system_error and task.id in v.system_error


TEST_BODY = '''    """!
    query: Move 1 from A1 to A2.
    init:
      standin_bank:
        golden_test_case:
          tool_interactions:
            - tool: transfer
              parameters: {from_id: A1, to_id: A2, amount: 1}
    """
    validate_database(x)
'''


@pytest.mark.parametrize(
    "code, why",
    [
        ("async def test_async(x, judge):\n" + TEST_BODY, r"test test_async \(line \d+\) is an `async def`"),
        (
            "class TestGroup:\n    def test_method(self, x, judge):\n" + TEST_BODY.replace("\n    ", "\n        ").replace('    "', '        "', 1),
            r"test test_method \(line \d+\) is a method of class TestGroup",
        ),
        (
            "def test_outer(x, judge):\n    def test_inner(x, judge):\n"
            + TEST_BODY.replace("\n    ", "\n        ").replace('    "', '        "', 1)
            + "    return test_inner\n",
            r"test test_inner \(line \d+\) is nested in function test_outer",
        ),
        (
            "if True:\n    def test_guarded(x, judge):\n" + TEST_BODY.replace("\n    ", "\n        ").replace('    "', '        "', 1),
            r"test test_guarded \(line \d+\) is defined inside a `if` block",
        ),
    ],
)
def test_tests_the_bridge_cannot_collect_are_refused_naming_the_case(tb, tmp_path, code, why):
    ds = _dataset_copy(tb, tmp_path)
    (ds / "test_case" / "standin_bank_odd.py").write_text(HELPERS + "\n\n" + code)
    with pytest.raises(TaskFileError, match=r"standin_bank_odd\.py: task 'standin_bank_odd\.py:test_\w+': " + why):
        load_thinkingbox(ds, allow_python=True)


@pytest.mark.parametrize(
    "rebind",
    [
        "validate_database = lambda x: None",
        "def validate_database(x):\n    pass",
        "from os import getcwd as validate_database",
        "del validate_database",
        "def reset():\n    global validate_database\n    validate_database = print",
    ],
)
def test_a_rebound_benchmark_helper_is_not_graded_by_hash(tb, tmp_path, rebind):
    ds = _dataset_copy(tb, tmp_path)
    (ds / "test_case" / "standin_bank_rebound.py").write_text(HELPERS + "\n\n" + rebind + "\n\n\ndef test_rebound(x, judge):\n" + TEST_BODY)
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_rebound.py:test_rebound"]))
    with pytest.raises(TaskFileError, match=r"arbitrary Python \(helper validate_database is decorated or bound more than once"):
        load_thinkingbox(ds, lst, allow_python=False)
    ((task, domain),) = load_thinkingbox(ds, lst, allow_python=True)
    assert domain.cases[task.id].check == "python"  # run by ThinkingBox's own worker, as ThinkingBox would
    # the unmodified helpers still classify as the benchmark's hash check
    (ds / "test_case" / "standin_bank_rebound.py").write_text(HELPERS + "\n\n\ndef test_rebound(x, judge):\n" + TEST_BODY)
    ((task, domain),) = load_thinkingbox(ds, lst, allow_python=False)
    assert domain.cases[task.id].check == "benchmark"


def _servers(tb, tmp_path, env: dict[str, str], **bounds) -> Path:
    path = tmp_path / "servers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "standin_bank": {
                        "type": "mcp-process",
                        "command": ["{python}", str(SERVER)],
                        **bounds,
                        "env": {"TB_STANDIN_PID_DIR": str(tb["pids"]), **env},
                    }
                }
            }
        )
    )
    return path


def _guarded_play(task, domain, agent, guard_s: float = 120.0, **kw):
    """`play`, failing the test (never hanging it) when the attempt does not end within `guard_s`."""
    be = make_backend("sqlite")
    return asyncio.run(asyncio.wait_for(play(task, domain, agent, ScriptedUser([]), EpisodeLimits(**kw), backend=be), guard_s))


@pytest.mark.parametrize("startup", ["silent", "garbage"])
def test_a_server_that_never_answers_initialize_is_bounded_by_its_startup_timeout(tb, tmp_path, startup):
    servers = _servers(tb, tmp_path, {"TB_STANDIN_STARTUP": startup}, startup_timeout=2)
    ((task, domain),) = select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}", tb_servers=servers, tb_no_sources=True)
    before = {p.name for p in tb["pids"].iterdir()}
    out = _guarded_play(task, domain, make_scripted_agent("scripted:gold", task, domain), guard_s=60)
    assert out.verdict.system_error and out.verdict.reward is None
    assert "did not start" in out.verdict.system_error and "start-up bound of 2 s" in out.verdict.system_error
    if startup == "garbage":
        assert "line(s) to stdout that are not MCP messages" in out.verdict.system_error and "garbage" in out.verdict.system_error
    pids = _new_pids(tb, before)
    assert len(pids) == 1 and not _alive(pids[0])


@pytest.mark.parametrize("value", [0, -1, "soon", True])
def test_server_bounds_must_be_positive_seconds(tb, tmp_path, value):
    from groundstate.worlds.thinkingbox import load_servers

    with pytest.raises(TaskFileError, match=r"field 'servers.standin_bank.startup_timeout': must be a positive number of seconds"):
        load_servers(_servers(tb, tmp_path, {}, startup_timeout=value))


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan's zombie is its new parent's to reap)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_processes_a_server_spawned_die_with_its_attempt_even_when_it_exits_cleanly(tb, tmp_path):
    servers = _servers(tb, tmp_path, {"TB_STANDIN_SPAWN": "1"})
    ((task, domain),) = select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}", tb_servers=servers, tb_no_sources=True)
    before = {p.name for p in tb["pids"].iterdir()}
    out = _guarded_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.reward == 1, out.verdict.reasons
    children = [int(p.stem) for p in tb["pids"].glob("*.child") if p.name not in before]
    assert len(children) == 1 and not _running(children[0])
    assert not [p for p in _new_pids(tb, before) if _alive(p)]


def test_a_server_writing_to_stdout_is_counted_and_summarised_not_echoed(tb, tmp_path, caplog):
    import logging

    servers = _servers(tb, tmp_path, {"TB_STANDIN_STDOUT_NOISE": "2000"})
    ((task, domain),) = select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}", tb_servers=servers, tb_no_sources=True)
    with caplog.at_level(logging.DEBUG):
        out = _guarded_play(task, domain, make_scripted_agent("scripted:gold", task, domain))
    assert out.verdict.reward == 1 and out.verdict.system_error is None, out.verdict.reasons
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage()[:200] for r in loud[:3]]
    assert "2000 line(s) to stdout that are not MCP messages" in loud[0].getMessage() and "debug: loading row 0" in loud[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback per line


def test_a_framework_test_that_never_returns_is_cut_off_by_the_grading_bound(tb, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FRAMEWORK))
    monkeypatch.setenv("PYTHONPATH", str(FRAMEWORK))
    ds = _dataset_copy(tb, tmp_path)
    pidfile = tmp_path / "worker.pid"
    (ds / "test_case" / "standin_bank_spin.py").write_text(
        HELPERS
        + f'''

def test_spin(x: TestContext, judge: Judge):
    """!
    query: Say hello.
    """
    import os
    open({str(pidfile)!r}, "w").write(str(os.getpid()))
    while True:
        pass
'''
    )
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_spin.py:test_spin"]))
    ((task, domain),) = select_tasks(f"thinkingbox:{ds}::{lst}", tb_servers=tb["servers_ok"], tb_no_sources=True)
    out = _guarded_play(task, domain, make_scripted_agent("scripted:noop", task, domain), grade_timeout=3)
    assert out.verdict.system_error and out.verdict.reward is None
    assert "grading standin_bank_spin.py:test_spin ran past the grading bound of 3 s (--grade-timeout)" in out.verdict.system_error
    assert pidfile.exists() and not _running(int(pidfile.read_text()))  # the worker was killed, not left spinning
    # the CLI's --grade-timeout reaches it, and the attempt still gets its record
    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.records import read_records

    results = tmp_path / "results.jsonl"
    r = CliRunner().invoke(
        app,
        [
            "run",
            "--agent",
            "scripted:noop",
            "--tasks",
            f"thinkingbox:{ds}::{lst}",
            "--tb-servers",
            str(tb["servers_ok"]),
            "--tb-no-sources",
            "--grade-timeout",
            "2",
            "--out",
            str(results),
        ],
    )
    (record,) = read_records(results)
    assert "ran past the grading bound of 2 s (--grade-timeout)" in record.system_error, r.output


def test_thinkingbox_effects_that_never_come_are_cut_off_by_the_grading_bound(tb, tmp_path):
    servers = _servers(tb, tmp_path, {"TB_STANDIN_HANG_EFFECTS": "1"})
    ((task, domain),) = select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}", tb_servers=servers, tb_no_sources=True)
    before = {p.name for p in tb["pids"].iterdir()}
    out = _guarded_play(task, domain, make_scripted_agent("scripted:gold", task, domain), guard_s=60, grade_timeout=2)
    assert out.verdict.system_error and out.verdict.reward is None
    assert f"grading {task.id} ran past the grading bound of 2 s (--grade-timeout)" in out.verdict.system_error
    pids = _new_pids(tb, before)
    assert len(pids) == 1 and not _alive(pids[0])


def test_a_native_golden_replay_that_hangs_is_cut_off_by_the_grading_bound(backend, monkeypatch):
    import threading

    from groundstate.grading.grader import Grader
    from groundstate.worlds.domain import iter_tasks

    release = threading.Event()
    monkeypatch.setattr(Grader, "golden", lambda self, task, template: release.wait(60))  # a gold replay that never ends
    monkeypatch.setattr(Grader, "cached", lambda self, task, template: None)  # not computed by an earlier test
    task, domain = iter_tasks(["retail"])[0]

    async def attempt():
        try:
            return await asyncio.wait_for(
                play(
                    task,
                    domain,
                    make_scripted_agent("scripted:gold", task, domain),
                    ScriptedUser([]),
                    EpisodeLimits(grade_timeout=1),
                    backend=backend,
                ),
                60,
            )
        finally:
            release.set()

    out = asyncio.run(attempt())
    assert out.verdict.system_error and out.verdict.reward is None and out.trajectory is None
    assert f"the golden replay of {task.id} ran past the grading bound of 1 s (--grade-timeout)" in out.verdict.system_error


def test_a_native_grade_that_hangs_is_cut_off_by_the_grading_bound(backend):
    """The SQL grader under the same bound: a judge that never answers a rubric (state passed) on both backends."""
    import threading

    from groundstate.grading.judge import Judge
    from groundstate.worlds.domain import iter_tasks

    release = threading.Event()

    class Stalled:
        def create(self, **kw):
            release.wait(60)  # a judge endpoint that never answers (released when the test ends)
            raise RuntimeError("released")

    client = type("Client", (), {"chat": type("Chat", (), {"completions": Stalled()})()})()
    task, domain = iter_tasks(["retail"])[0]
    task = task.model_copy(update={"rubrics": ["Is the reply polite?"]})

    async def attempt():
        try:
            return await asyncio.wait_for(
                play(
                    task,
                    domain,
                    make_scripted_agent("scripted:gold", task, domain),
                    ScriptedUser([]),
                    EpisodeLimits(grade_timeout=1),
                    backend=backend,
                    judge=Judge("openai:judge@http://x", client=client),
                ),
                60,
            )
        finally:
            release.set()  # before asyncio.run waits for its worker threads

    out = asyncio.run(attempt())
    assert out.verdict.system_error and out.verdict.reward is None
    assert f"grading {task.id} ran past the grading bound of 1 s (--grade-timeout)" in out.verdict.system_error


SPIN_TEST = '''

def test_spin(x: TestContext, judge: Judge):
    """!
    query: Say hello.
    init:
      standin_bank: {}
    """
    import os
    open(os.environ["TB_SPIN_PIDFILE"], "w").write(str(os.getpid()))
    while True:
        pass
'''


@pytest.mark.parametrize("where, sigint", [("server child", "default"), ("test worker", "default"), ("server child", "ignored")])
def test_sigterm_of_groundstate_run_stops_what_its_attempts_started(tb, tmp_path, where, sigint):
    """A `groundstate run` ended by SIGTERM (timeout, a scheduler, kill) stops what its attempts started, as Ctrl-C does:
    the process a server spawned (mid-grading, the server's effects never come) and a framework test worker spinning
    in `while True`; also for a background job, whose SIGINT is ignored. Before: Python's default SIGTERM ended the run
    at once, and both were left running for good."""
    import signal
    import subprocess
    import time

    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(FRAMEWORK)])}
    if where == "server child":
        ds, lst = tb["dataset"], tb["list_transfer"]
        servers = tmp_path / "servers.yaml"
        servers.write_text(
            yaml.safe_dump(
                {
                    "servers": {
                        "standin_bank": {
                            "type": "mcp-process",
                            "command": ["{python}", str(SERVER)],
                            "env": {"TB_STANDIN_PID_DIR": str(pids), "TB_STANDIN_SPAWN": "1", "TB_STANDIN_HANG_EFFECTS": "1"},
                        }
                    }
                }
            )
        )

        def started():
            return [int(p.stem) for p in pids.glob("*.child")]
    else:
        ds = _dataset_copy(tb, tmp_path)
        (ds / "test_case" / "standin_bank_spin.py").write_text(HELPERS + SPIN_TEST)
        lst = tmp_path / "list.yaml"
        lst.write_text(yaml.safe_dump(["standin_bank_spin.py:test_spin"]))
        servers, env["TB_SPIN_PIDFILE"] = tb["servers_ok"], str(pids / "worker")

        def started():
            return [int(p.read_text())] if p.exists() and p.read_text() else []

        p = pids / "worker"
    cmd = [
        sys.executable,
        "-c",
        "from groundstate.cli import app; app()",
        "run",
        "--agent",
        "scripted:gold",
        "--tasks",
        f"thinkingbox:{ds}::{lst}",
        "--tb-servers",
        str(servers),
        "--tb-no-sources",
        "--out",
        str(tmp_path / "results.jsonl"),
    ]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=ignore)
    try:
        for _ in range(1200):  # until the attempt has started what it must stop (bounded, never a timing assertion)
            if started() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert started(), proc.stderr.read().decode() if proc.poll() is not None else "nothing started"
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        for _ in range(100):  # a group killed with SIGTERM then SIGKILL: give the kernel a moment to reap
            if not [q for q in started() if _running(q)]:
                break
            time.sleep(0.05)
        assert not [q for q in started() if _running(q)], f"{where} outlived a SIGTERM of groundstate run"
    finally:
        if proc.poll() is None:
            proc.kill()
        for q in started():
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(q, signal.SIGKILL)


HASH_CHECK = """    result_db_hash = x.effects[SERVER_NAME]["result_db_hash"]
    golden_db_hash = x.effects[SERVER_NAME]["golden_db_hash"]
    if result_db_hash != golden_db_hash:
        assert False, json.dumps(x.effects[SERVER_NAME].get("diff", []))
"""
# the benchmark's own form: the failing branch formats the diff before it asserts
BENCHMARK_HASH_CHECK = HASH_CHECK.replace(
    '        assert False, json.dumps(x.effects[SERVER_NAME].get("diff", []))\n',
    """\
        diff = x.effects[SERVER_NAME].get("diff", [])
        error_msg = f"Result hash: {result_db_hash}\\nGolden hash: {golden_db_hash}\\n"
        if diff:
            for i, d in enumerate(diff, 1):
                error_msg += f"{i}. {d.get('path', 'N/A')}: " + json.dumps(d.get("result"), ensure_ascii=False)[0:500]
        assert False, error_msg
""",
)


@pytest.mark.parametrize(
    "helpers, why",
    [
        (
            HELPERS.replace(HASH_CHECK, '    assert "transferred" in x.response\n' + HASH_CHECK),
            "helper validate_database .* is not written as the benchmark's hash",
        ),
        (
            HELPERS.replace(HASH_CHECK, '    if "sorry" in x.response:\n        return\n' + HASH_CHECK),
            "helper validate_database .* is not written as",
        ),
        (
            HELPERS.replace(
                "        assert False, json.dumps", "        if x.response == 'magic':\n            return\n        assert False, json.dumps"
            ),
            "helper validate_database .* is not written as",
        ),
        (
            HELPERS.replace('        assert False, json.dumps(x.effects[SERVER_NAME].get("diff", []))', "        pass"),
            "helper validate_database .* is not written as",
        ),
        (
            HELPERS.replace(
                "        assert False, json.dumps",
                "        try:\n            assert False\n        except AssertionError:\n            pass\n        assert False, json.dumps",
            ),
            "helper validate_database .* is not written as",
        ),
        (
            HELPERS.replace("        assert judge.text_yesno(x.response, rubric)", "        assert judge.text_yesno(x.response, rubric) or True"),
            "helper validate_rubrics_yesno .* is not written as the benchmark's yes/no rubric check",
        ),
        (HELPERS + "\nvalidate_database.__code__ = (lambda x: None).__code__\n", r"the file line \d+ runs code at module level \(assign\)"),
        (HELPERS + "\nglobals()['validate_database'] = print\n", r"the file line \d+ runs code at module level \(assign\)"),
        (
            HELPERS + "\nsetattr(__import__('sys').modules[__name__], 'validate_database', print)\n",
            r"the file line \d+ runs code at module level \(expr\)",
        ),
        ("import sitecustomize_patches_helpers\n" + HELPERS, r"the file line 1 runs code at module level \(import\)"),
    ],
)
def test_a_helper_that_checks_something_else_is_not_graded_by_hash(tb, tmp_path, helpers, why):
    """#20 item 8, verify pass: a `validate_database` that mentions both hashes but also asserts on the reply (ThinkingBox fails
    the gold reply; the bridge gave 1), returns early, swallows its assertion or never asserts, a rubric helper that always
    passes, and a file that patches its helper at module level (`__code__`, `globals()`, `setattr`) or imports a module that
    could: all were graded by hash. Only the benchmark's helpers, as written, in a file that runs nothing else, are."""
    ds = _dataset_copy(tb, tmp_path)
    assert helpers != HELPERS
    test = "\n\ndef test_odd(x, judge):\n" + TEST_BODY + "    validate_rubrics_yesno(x, judge)\n"
    (ds / "test_case" / "standin_bank_odd.py").write_text(helpers + test)
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_odd.py:test_odd"]))
    with pytest.raises(TaskFileError, match=r"standin_bank_odd\.py:test_odd': its checks are arbitrary Python \(" + why):
        load_thinkingbox(ds, lst, allow_python=False)
    ((task, domain),) = load_thinkingbox(ds, lst, allow_python=True)
    assert domain.cases[task.id].check == "python"  # run by ThinkingBox's own worker, as ThinkingBox would


def test_the_benchmarks_own_helpers_are_graded_by_hash(tb, tmp_path):
    ds = _dataset_copy(tb, tmp_path)
    helpers = "# Copyright\n\nfrom __future__ import annotations\n\n" + HELPERS.replace(HASH_CHECK, BENCHMARK_HASH_CHECK)
    assert helpers != HELPERS
    (ds / "test_case" / "standin_bank_bench.py").write_text(
        helpers + "\n\ndef test_bench(x, judge):\n" + TEST_BODY + "    validate_rubrics_yesno(x, judge)\n"
    )
    lst = tmp_path / "list.yaml"
    lst.write_text(yaml.safe_dump(["standin_bank_bench.py:test_bench"]))
    ((task, domain),) = load_thinkingbox(ds, lst, allow_python=False)
    assert domain.cases[task.id].check == "benchmark"


@pytest.mark.parametrize("target", ["secret.txt", "missing.txt"])
def test_an_agent_file_symlinked_outside_the_dataset_is_refused_unread(tb, tmp_path, target):
    """Verify pass of #20 item 13: `agent/think.yaml` linked to a file outside the dataset was read, and the error told whether
    that file exists and whether it is YAML. Now it is refused before it is read, with the same message either way."""
    ds = _dataset_copy(tb, tmp_path)
    (tmp_path / "secret.txt").write_text("secret: [unclosed\n")
    (ds / "agent" / "think.yaml").unlink()
    (ds / "agent" / "think.yaml").symlink_to(tmp_path / target)
    with pytest.raises(TaskFileError, match=r"think\.yaml: resolves outside .*agent: the agent file must lie inside") as e:
        load_thinkingbox(ds, tb["list_transfer"])
    assert "unclosed" not in str(e.value)


@pytest.mark.slow
def test_thinkingbox_tasks_get_a_certificate_through_the_bridge(tb, tmp_path):
    """Through the bridge a ThinkingBox task is certified once (its state lives in its servers, not in a backend):
    lint, the read alternatives (reads as the server marks them) and the hacks, each attempt its own server processes."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    selector = f"thinkingbox:{tb['dataset']}::{tb['list_transfer']}"
    args = ["tasks", "certify", "--tasks", selector, "--tb-servers", str(tb["servers_ok"]), "--tb-no-sources", "--json"]
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "certs.json")])
    assert r.exit_code == 0, r.output
    (cert,) = json.loads((tmp_path / "certs.json").read_text())["per_task"]
    assert cert["certified"] and cert["backends"] == ["sqlite"] and cert["sqlite_equals_postgres"] is None
    assert cert["gold_pass"] and cert["noop_fail"] and cert["mutants_killed"] == cert["mutants_counted"] > 0
    assert cert["alternatives_tried"] == cert["alternatives_accepted"] >= 3  # get_account added twice and repeated
    assert cert["hacks_tried"] >= 2 and cert["hacks_passed"] == 0
