"""A chat model in groundstate's Gymnasium environment (docs/INTEGRATIONS.md).

    OPENAI_BASE_URL=http://localhost:8000/v1 MODEL=Qwen/Qwen2.5-7B-Instruct python docs/examples/gymnasium_text_env.py

The policy is any OpenAI-compatible endpoint; its tool calls are written into the action as `<tool_call>` blocks.
"""

import json
import os

import gymnasium as gym
from openai import OpenAI

import groundstate.integrations.gymnasium  # noqa: F401 - registers groundstate/Text-v0

client = OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "none"))
model = os.environ.get("MODEL", "Qwen/Qwen2.5-7B-Instruct")
env = gym.make("groundstate/Text-v0", tasks=os.environ.get("TASKS", "kiosk-cancel-001"))

for episode in range(int(os.environ.get("EPISODES", "1"))):
    obs, info = env.reset(seed=episode)
    messages, tools = info["messages"], info["tools"]
    done = False
    while not done:
        reply = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
        calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments or "{}")} for c in reply.tool_calls or []]
        action = (reply.content or "") + "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
        obs, reward, terminated, truncated, info = env.step(action)
        messages = messages + info["messages"]  # the turn as the environment read it, then what came back
        done = terminated or truncated
    print(f"{info['task_id']}: reward {reward} ({info['finish_reason']})")
env.close()
