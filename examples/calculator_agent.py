"""An agent for ``rollout.multi_turn.agent`` (docs/environments.md, "The gateway"): the tool demo's calculator
episode written with the ``openai`` client, as any agent framework would run it.

    steadyrl train demo.task=tool rollout.multi_turn.tools=[] rollout.multi_turn.agent=examples/calculator_agent.py:run_episode

It offers the calculator as a tool, runs the calls the policy makes, sends the results back, and
returns None: the demo's reward function scores the transcript (the final answer).
"""

import json

from steadyrl.demo.calculator import calculate
from steadyrl.demo.tool_demo import tool_schemas

MAX_CALLS = 2


async def run_episode(row, client):
    messages = list(row["prompt"]) if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
    tools = tool_schemas()
    for _ in range(MAX_CALLS):
        reply = await client.chat.completions.create(model="policy", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                result = calculate(**json.loads(call.function.arguments))
            except Exception as err:  # the policy's call was wrong: it reads the error
                result = f"Error: {err}"
            messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name,
                             "content": str(result)})
    return None
