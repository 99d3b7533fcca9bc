"""A ThinkingBox-format dataset written on demand, served by the stand-in MCP server of tests/fixtures/thinkingbox.

`write_dataset(root)` writes the dataset (agent, scenario, two test files), its test lists and servers files,
and returns their paths by name (the `tb` fixture of tests/conftest.py); `tb_pairs` selects its cases and `tb_play`
plays one attempt. The ThinkingBox bridge tests, the grading hardening tests and the behaviour record share them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from groundstate.agents.scripted import ScriptedUser
from groundstate.state import make_backend
from groundstate.worlds.attempt import play
from groundstate.worlds.selectors import select_tasks

SERVER = Path(__file__).parent / "fixtures" / "thinkingbox" / "server.py"
FRAMEWORK = Path(__file__).parent / "fixtures" / "thinkingbox" / "framework"  # a stand-in for ThinkingBox's test worker

AGENT = """\
parallel_tool_calls: false
system_instructions: |
  You are an AI Agent. Help users achieve their objectives.
builtin_tools: []
"""

SCENARIO = {
    "world_state": {
        "standin_bank": {
            "sources": [{"name": "policy.md", "snippets": ["Transfers need the account owner's consent."]}],
            "data_patch": {"accounts": [{"id": "A1", "owner": "Alice", "balance": 100}, {"id": "A2", "owner": "Bob", "balance": 20}]},
        }
    },
    "tools": [
        {"name": "get_account"},
        {"name": "transfer", "override_arg_description": {"amount": "Whole currency units."}},
        {"name": "create_ticket", "override_description": "Open a support ticket (for lost or stolen cards too)."},
    ],
    "bot_instructions": "Current date: 2026-01-01",
}

HELPERS = '''\
import json

from thinkingbox.common import Judge, TestContext

"""!
scenario: standin_bank
"""
SERVER_NAME = "standin_bank"


def validate_database(x: TestContext):
    result_db_hash = x.effects[SERVER_NAME]["result_db_hash"]
    golden_db_hash = x.effects[SERVER_NAME]["golden_db_hash"]
    if result_db_hash != golden_db_hash:
        assert False, json.dumps(x.effects[SERVER_NAME].get("diff", []))


def validate_rubrics_yesno(x: TestContext, judge: Judge):
    rubrics = x.effects[SERVER_NAME].get("rubrics_yesno", [])
    for rubric in rubrics:
        assert judge.text_yesno(x.response, rubric), f"Rubric yesno failed: {rubric}"
'''

GROUP1 = (
    HELPERS
    + '''

def test_transfer(x: TestContext, judge: Judge):
    """!
    query: |
        Hi, I am Carol (account A3). Please move 30 from Alice's account A1 to Bob's account A2.
    user_context: |
        You are Carol, Alice's accountant. Alice consented to the transfer.
    init:
      standin_bank:
        data_patch:
          accounts:
            - {id: A3, owner: Carol, balance: 5}
        golden_test_case:
          tool_interactions:
            - tool: get_account
              parameters: {account_id: A1}
            - tool: transfer
              parameters: {from_id: A1, to_id: A2, amount: 30}
    """
    validate_database(x)


def test_ticket(x: TestContext, judge: Judge):
    """!
    query: My card for account A2 was stolen, please open a ticket.
    init:
      standin_bank:
        golden_test_case:
          tool_interactions:
            - tool: create_ticket
              parameters: {account_id: A2, subject: Stolen card}
        rubrics_yesno:
          - "Does the reply tell the customer that a ticket was opened?"
    """
    validate_database(x)
    validate_rubrics_yesno(x, judge)


def test_later(x: TestContext, judge: Judge):
    """!
    query: Not ready yet.
    tags: [skip]
    """
    validate_database(x)
'''
)

CUSTOM = (
    HELPERS
    + '''

def test_custom_check(x: TestContext, judge: Judge):
    """!
    query: Move 1 from A1 to A2.
    init:
      standin_bank:
        golden_test_case:
          tool_interactions:
            - tool: transfer
              parameters: {from_id: A1, to_id: A2, amount: 1}
    """
    assert x.effects[SERVER_NAME]["result_db_state"]["accounts"][0]["balance"] == 99


def test_custom_judged(x: TestContext, judge: Judge):
    """!
    query: Say hello.
    """
    assert judge.text_yesno(x.response, "Is it a greeting?")


def test_custom_broken(x: TestContext, judge: Judge):
    """!
    query: Say hello.
    """
    x.effects["no_such_server"]
'''
)


def write_dataset(root: Path) -> dict[str, Path]:
    """The dataset directory, test lists (`list_main`, `list_transfer`, `list_custom`) and servers files
    (`servers_ok`, `servers_crash_start`, `servers_crash_transfer`) under `root`."""
    ds = root / "dataset"
    (ds / "agent").mkdir(parents=True)
    (ds / "agent" / "think.yaml").write_text(AGENT)
    (ds / "scenario").mkdir()
    (ds / "scenario" / "standin_bank.yaml").write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    (ds / "test_case" / "standin_bank").mkdir(parents=True)
    (ds / "test_case" / "standin_bank" / "standin_bank_group1.py").write_text(GROUP1)
    (ds / "test_case" / "standin_bank_custom.py").write_text(CUSTOM)
    lists = {
        "main": ["standin_bank_group1.py:test_transfer", "standin_bank_group1.py:test_ticket"],
        "transfer": ["standin_bank_group1.py:test_transfer"],
        "custom": ["standin_bank_custom.py:test_custom_check"],
    }
    out = {"dataset": ds, "root": root}
    for name, items in lists.items():
        out[f"list_{name}"] = root / f"{name}.yaml"
        out[f"list_{name}"].write_text(yaml.safe_dump(items))
    out["pids"] = root / "pids"
    out["pids"].mkdir()
    for name, extra in {"ok": {}, "crash_start": {"TB_STANDIN_CRASH": "start"}, "crash_transfer": {"TB_STANDIN_CRASH": "tool:transfer"}}.items():
        env = {"TB_STANDIN_PID_DIR": str(out["pids"]), "TB_STANDIN_NO_TYPESENSE": "1", **extra}
        servers = {
            "use_internal_servers": True,
            "servers": {"standin_bank": {"type": "mcp-process", "command": ["{python}", str(SERVER)], "env": env}},
        }
        out[f"servers_{name}"] = root / f"servers_{name}.yaml"
        out[f"servers_{name}"].write_text(yaml.safe_dump(servers))
    return out


def tb_pairs(tb: dict[str, Path], which: str = "main", servers: str = "ok", no_sources: bool = True):
    """The (task, domain) pairs of one test list of the dataset, with one of its servers files."""
    return select_tasks(f"thinkingbox:{tb['dataset']}::{tb['list_' + which]}", tb_servers=tb[f"servers_{servers}"], tb_no_sources=no_sources)


def tb_play(task, domain, agent, judge=None):
    """One attempt through `groundstate.worlds.attempt.play`, without a user."""
    return asyncio.run(play(task, domain, agent, ScriptedUser([]), backend=make_backend("sqlite"), judge=judge))
