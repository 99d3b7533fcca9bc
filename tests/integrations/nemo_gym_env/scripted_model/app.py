"""A NeMo Gym model server that plays a script: the tool calls a row names, one per response, then "Done.".

The policy of the NeMo Gym tests, as `agents.scripted.scripted_agent` is `groundstate run`'s: each row's
`responses_create_params.metadata["script"]` is the JSON list of calls (`{"tool", "args"}`) to make; the call made
next is the one after those already answered (the `function_call_output` items in the input). Written against NeMo
Gym's own model-server base class, so NeMo Gym's `simple_agent` drives it as it drives a real model's.
"""

import json
from time import time
from uuid import uuid4

from nemo_gym.base_responses_api_model import BaseResponsesAPIModelConfig, Body, SimpleResponsesAPIModel
from nemo_gym.openai_utils import (
    NeMoGymChatCompletion,
    NeMoGymChatCompletionCreateParamsNonStreaming,
    NeMoGymResponse,
    NeMoGymResponseCreateParamsNonStreaming,
)


class ScriptedModelConfig(BaseResponsesAPIModelConfig):
    pass


class ScriptedModel(SimpleResponsesAPIModel):
    config: ScriptedModelConfig

    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming = Body()) -> NeMoGymResponse:
        script = json.loads((body.metadata or {}).get("script", "[]"))
        items = body.input if isinstance(body.input, list) else []
        answered = sum(1 for item in items if _type(item) == "function_call_output")
        if answered < len(script):
            call = script[answered]
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_{uuid4().hex}",
                    "call_id": f"call_{answered}",
                    "name": call["tool"],
                    "arguments": json.dumps(call["args"]),
                    "status": "completed",
                }
            ]
        else:
            output = [
                {
                    "type": "message",
                    "id": f"msg_{uuid4().hex}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
                }
            ]
        return NeMoGymResponse(
            id=f"resp_{uuid4().hex}",
            created_at=int(time()),
            model="scripted",
            object="response",
            output=output,
            tool_choice="auto",
            parallel_tool_calls=False,
            tools=body.tools,
        )

    async def chat_completions(self, body: NeMoGymChatCompletionCreateParamsNonStreaming = Body()) -> NeMoGymChatCompletion:
        raise NotImplementedError("the scripted model answers the Responses API only (NeMo Gym's simple_agent uses it)")


def _type(item):
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


if __name__ == "__main__":
    ScriptedModel.run_webserver()
