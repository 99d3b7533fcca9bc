"""An episode whose tools come over MCP (the SDK's in-process transport) is graded like any other."""

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from groundstate.agents import make_agent, make_user  # noqa: E402
from groundstate.grading.grader import grade  # noqa: E402
from groundstate.state.base import ForkUnsupported  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.tools.mcp_client import McpToolset  # noqa: E402
from groundstate.tools.mcp_server import build_server  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402
from groundstate.worlds.environment import SqlEnvironment  # noqa: E402
from groundstate.worlds.episode import run_episode  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


class McpToolsEnvironment:
    """An attempt's environment whose tools are called over MCP (a server serving the attempt's own sandbox); the
    state and the verdict are the sandbox's (`inner`)."""

    def __init__(self, inner: SqlEnvironment, tools: McpToolset):
        self.inner, self.tools, self.task = inner, tools, inner.task

    def initial_messages(self):
        return self.inner.initial_messages()

    def tool_schemas(self):
        return self.tools.openai_schemas()

    def user_tools(self):
        return None

    async def call_tool(self, name, arguments):
        return await self.tools.acall(name, arguments)

    async def grade(self, trajectory, judge=None):
        return await self.inner.grade(trajectory, judge)

    async def changes(self):
        return await self.inner.changes()

    async def fork(self):
        raise ForkUnsupported("McpToolsEnvironment cannot fork: its tools are served over an MCP session to one sandbox")

    async def close(self):
        await self.inner.close()


@pytest.mark.parametrize("spec,reward", [("scripted:gold", 1), ("scripted:noop", 0)])
def test_episode_over_mcp_tools(spec, reward):
    domain = Domain(SHOP)
    task = domain.task("shop-multi")
    backend = SqliteBackend()
    with backend.open(backend.prepare(domain, task.patch)) as sandbox:

        async def main():
            async with McpToolset.in_process(build_server(domain, backend, task, sandbox=sandbox)) as tools:
                assert set(tools.names()) == set(domain.tools.names())
                env = McpToolsEnvironment(SqlEnvironment(task, sandbox), tools)
                return await run_episode(env, make_agent(spec, task, domain), make_user("scripted", task))

        traj = asyncio.run(main())
        assert grade(task, sandbox).reward == reward
    if spec == "scripted:gold":
        assert [c.name for c in traj.tool_calls] == [c.tool for c in task.gold] and all(c.ok for c in traj.tool_calls)
