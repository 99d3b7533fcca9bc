"""Blame: the first call after which a failed attempt could no longer reach the golden state, on hand-made attempts
and on the noisy scripted agent, whose injected mistakes are known."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from groundstate.agents import ScriptedAgent, make_agent, make_user
from groundstate.grading.blame import blame, names_injected
from groundstate.grading.grader import grader_for
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import Domain, iter_tasks

SHOP = Domain(Path(__file__).parents[1] / "fixtures" / "shop")


def attempt(task, domain, agent, backend):
    out = asyncio.run(play(task, domain, agent, make_user("scripted", task), backend=backend))
    return out.verdict, out.trajectory.tool_calls


def blame_of(task, domain, calls, backend):
    template = backend.prepare(domain, task.patch)
    return blame(task, template, grader_for(backend), calls)


@pytest.mark.parametrize(
    "task_id, calls, expected",
    [
        ("shop-cancel", [], ("never_acted", None)),
        ("shop-cancel", [{"tool": "get_order", "args": {"order_id": 1}}], ("never_acted", None)),
        (
            "shop-cancel",
            [{"tool": "cancel_order", "args": {"order_id": 1}}, {"tool": "add_note", "args": {"customer_id": 1, "body": "x"}}],
            ("diverged", 1),
        ),
        (
            "shop-multi",
            [{"tool": "set_tier", "args": {"customer_id": 3, "tier": "gold"}}, {"tool": "set_total", "args": {"order_id": 3, "total": 41.0}}],
            ("diverged", 1),
        ),
        ("shop-multi", [{"tool": "add_note", "args": {"customer_id": 3, "body": "hi"}}], ("diverged", 0)),  # a row the golden state leaves alone
        (
            "shop-multi",
            [{"tool": "find_customer", "args": {"email": "c3@example.com"}}, {"tool": "set_tier", "args": {"customer_id": 3, "tier": "gold"}}],
            ("stopped_early", None),
        ),
        ("shop-refuse", [{"tool": "get_order", "args": {"order_id": 2}}, {"tool": "cancel_order", "args": {"order_id": 2}}], ("never_acted", 1)),
    ],
)
def test_blame_names_the_first_call_that_left_the_golden_path(task_id, calls, expected):
    backend = SqliteBackend()
    task = SHOP.task(task_id)
    verdict, executed = attempt(task, SHOP, ScriptedAgent(calls), backend)
    assert verdict.reward == 0
    b = blame_of(task, SHOP, executed, backend)
    assert (b.kind, b.call) == expected, b
    if b.kind == "diverged":
        assert b.tool == calls[b.call]["tool"] and b.rows


def test_blame_on_the_noisy_agent_names_its_injected_mistake():
    """Over the bundled suite, `scripted:noisy:0.3`: a failed attempt's blame is one of its injected mistakes (a changed
    or duplicated call, by its index; a dropped one as `stopped_early` / `never_acted`) for at least 95% of them."""
    backend = SqliteBackend()
    failed = named = 0
    misses = []
    for task, domain in iter_tasks():
        for a in range(2):
            agent = make_agent("scripted:noisy:0.3", task, domain, a)
            verdict, executed = attempt(task, domain, agent, backend)
            if verdict.reward != 0:
                continue
            failed += 1
            b = blame_of(task, domain, executed, backend)
            if names_injected(b, agent.injected):
                named += 1
            else:
                misses.append((task.id, a, b.to_json(), agent.injected))
    assert failed > 300
    assert named / failed >= 0.95, misses[:10]


def test_runs_record_blame_and_metrics_and_the_report_show_it(tmp_path):
    import json

    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.records import read_records

    runner = CliRunner()
    out = tmp_path / "run.jsonl"
    r = runner.invoke(app, ["run", "--agent", "scripted:noisy:0.5", "--tasks", str(SHOP.path), "--k", "6", "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = read_records(out)
    failed = [x for x in records if x.outcome == "fail"]
    assert failed and all(x.verdict.blame.kind in ("diverged", "stopped_early", "never_acted") for x in failed)
    assert all("blame" not in x.verdict for x in records if x.outcome == "pass")
    m = runner.invoke(app, ["metrics", str(out), "--json"])
    assert m.exit_code == 0, m.output
    by_family = json.loads(m.stdout)["blame_by_family"]
    assert {f: b["failed"] for f, b in by_family.items()} == {f: sum(x.family == f for x in failed) for f in {x.family for x in failed}}
    for b in by_family.values():
        assert sum(b["kinds"].values()) == sum(b["calls"].values()) == b["failed"] and b["most_common"].endswith(tuple(b["calls"]))
    html_path = tmp_path / "report.html"
    rep = runner.invoke(app, ["report", str(out), "--out", str(html_path)])
    assert rep.exit_code == 0, rep.output
    page = html_path.read_text()
    assert page.count("<div class='blame'>") == len(failed)
    diverged = next((x for x in failed if x.verdict.blame.kind == "diverged"), None)
    if diverged is not None:
        assert f"went wrong at call {diverged.verdict.blame.call}, {diverged.verdict.blame.tool}(" in page


def test_naming_an_injected_mistake_is_strict():
    from groundstate.tools.mutate import Injected
    from groundstate.types import Blame

    changed, dropped = [Injected("change", 1, 1)], [Injected("drop", 0, 0)]
    assert names_injected(Blame(kind="diverged", call=1, tool="t"), changed) and names_injected(
        Blame(kind="never_acted", call=1, tool="t"), changed
    )  # refused
    assert not names_injected(Blame(kind="diverged", call=0, tool="t"), changed)  # another call
    assert not names_injected(Blame(kind="stopped_early"), changed)  # nothing was dropped: a call is to blame
    assert names_injected(Blame(kind="stopped_early"), dropped) and not names_injected(Blame(kind="diverged", call=2, tool="t"), dropped)
