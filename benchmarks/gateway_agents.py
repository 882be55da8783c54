"""The tool demo's calculator episode as a plain-HTTP agent (``(row, base_url, api_key)``, the
standard library's ``urllib``): ``bench_gateway``'s second agent, to tell the gateway's own cost
from the ``openai`` client's (``examples/calculator_agent.py`` is the same episode with the client)."""

from __future__ import annotations

import json
import urllib.request

from steadyrl.demo.calculator import calculate
from steadyrl.demo.tool_demo import tool_schemas

TOOLS = tool_schemas()


def _post(base_url: str, api_key: str, body: dict) -> dict:
    request = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def run_episode(row, base_url, api_key):
    messages = list(row["prompt"])
    for _ in range(2):
        message = _post(base_url, api_key, {"model": "policy", "messages": messages, "tools": TOOLS})["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            break
        for call in message["tool_calls"]:
            try:
                result = calculate(**json.loads(call["function"]["arguments"]))
            except Exception as err:  # the policy's call was wrong: it reads the error
                result = f"Error: {err}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                             "content": str(result)})
    return None
