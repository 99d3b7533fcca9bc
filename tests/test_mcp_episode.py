"""An episode whose tools come over MCP (the SDK's in-process transport) is graded like any other."""

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from groundstate.agents import make_agent, make_user  # noqa: E402
from groundstate.episode import run_episode  # noqa: E402
from groundstate.grading import grade  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.tasks import Domain  # noqa: E402
from groundstate.tools.mcp_client import McpToolset  # noqa: E402
from groundstate.tools.mcp_server import build_server  # noqa: E402

SHOP = Path(__file__).parent / "fixtures" / "shop"


@pytest.mark.parametrize("spec,reward", [("scripted:gold", 1), ("scripted:noop", 0)])
def test_episode_over_mcp_tools(spec, reward):
    domain = Domain(SHOP)
    task = domain.task("shop-multi")
    backend = SqliteBackend()
    with backend.open(backend.prepare(domain, task.patch)) as sandbox:
        async def main():
            async with McpToolset.in_process(build_server(domain, backend, task, sandbox=sandbox)) as tools:
                assert set(tools.names()) == set(domain.tools.names())
                return await run_episode(task, domain, sandbox, make_agent(spec, task, domain), make_user("scripted", task), toolset=tools)

        traj = asyncio.run(main())
        assert grade(task, sandbox).reward == reward
    if spec == "scripted:gold":
        assert [c["name"] for c in traj.tool_calls] == [c.tool for c in task.gold] and all(c["ok"] for c in traj.tool_calls)
