"""Reward-hacking agents: none passes a bundled task; on a task whose gold holds a write that changes nothing, the
hacks that skip it pass and are reported as the task's defect."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from groundstate.audits.hacks import HACKS, hack, hack_calls
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.domain import Domain, iter_tasks

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


@pytest.mark.slow
def test_no_hack_passes_a_bundled_task():
    report = asyncio.run(hack(iter_tasks(), SqliteBackend())).to_json()
    assert report["tasks"] == len(iter_tasks())
    assert report["hacks_passed"] == 0, report["passed"][:10]
    assert set(report["tried"]) == set(HACKS) and report["hacks_tried"] > 4 * report["tasks"]


def test_a_task_with_a_write_that_changes_nothing_is_caught(tmp_path):
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    tier = Domain(shop).seed_rows()["customers"][0]["tier"]
    tasks = shop / "tasks" / "basic.yaml"
    text = tasks.read_text()
    old = "      - {tool: cancel_order, args: {order_id: 1}}\n"
    tasks.write_text(text.replace(old, old + f"      - {{tool: set_tier, args: {{customer_id: 1, tier: {tier}}}}}\n", 1))
    domain = Domain(shop)
    report = asyncio.run(hack([(domain.task("shop-cancel"), domain)], SqliteBackend()))
    # its gold's last write changes nothing: leaving it out (or guessing only the cancellation) passes, and says so
    assert sorted((p["hack"], p["task_id"]) for p in report.passed) == [
        ("gold_until_last_write", "shop-cancel"),
        ("instruction_writes", "shop-cancel"),
    ]
    # the hacks are what they say: no call claims success, the last write left out, an extra write appended
    task = domain.task("shop-cancel")
    gold = [c.model_dump() for c in task.gold]
    assert hack_calls("claim_success", task, domain, domain.tasks) == []
    assert hack_calls("gold_until_last_write", task, domain, domain.tasks) == gold[:1]
    extra = hack_calls("gold_plus_extra", task, domain, domain.tasks)
    assert extra[:2] == gold and extra[2]["tool"] == "set_tier" and extra[2]["args"] != gold[1]["args"]
    assert hack_calls("instruction_writes", task, domain, domain.tasks) == [{"tool": "cancel_order", "args": {"order_id": 1}}]
