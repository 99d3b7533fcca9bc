"""One episode through OpenEnv's own client against `groundstate serve --protocol openenv` (docs/INTEGRATIONS.md).

groundstate serve --protocol openenv --domain kiosk --port 8000 &
URL=http://127.0.0.1:8000 python docs/examples/openenv_client.py
"""

import asyncio
import os

from openenv.core.mcp_client import MCPToolClient

from groundstate.integrations.openenv import ReplyAction


async def main() -> None:
    async with MCPToolClient(base_url=os.environ.get("URL", "http://127.0.0.1:8000")) as env:
        await env.reset(task_id=os.environ.get("TASK", "kiosk-cancel-001"))
        tools = await env.list_tools()
        print("tools:", ", ".join(t.name for t in tools))
        print("result:", await env.call_tool("cancel_kiosk_order", order_id=1014))
        final = await env.step(ReplyAction(content="Order 1014 is cancelled."))
        print(f"done {final.done}, reward {final.reward}")


asyncio.run(main())
