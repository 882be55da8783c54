"""A ``verifiers`` environment (prime-rl's) trained through the gateway: ``rollout.multi_turn.agent`` hands each
row to the environment's own rollout, which calls the policy with the OpenAI client it is given,
and returns the environment's rubric score as the reward (docs/environments.md, "verifiers").

    pip install 'verifiers<0.2'      # 0.1.x: the Environment / Rubric API used here
    steadyrl train demo.task=tool rollout.multi_turn.tools=[] rollout.multi_turn.agent=examples/verifiers_agent.py:run_episode

The environment here is a ``SingleTurnEnv`` whose rubric checks the final answer against the row's
``answer`` column (the tool demo's multiplication questions); any other verifiers environment
(``vf.load_environment("...")`` of an installed one) is used the same way.
"""

import verifiers as vf
from datasets import Dataset


def correct(completion, answer, **kwargs) -> float:
    """1.0 when the last message of the completion is exactly the answer."""
    text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
    return float(str(text).strip() == str(answer).strip())


# verifiers wants a dataset for its own evaluation loop; the rows come from steadyrl's data here
ENV = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "What is 2*3?", "answer": "6"}]),
                       rubric=vf.Rubric(funcs=[correct]))


async def run_episode(row, client):
    output = await ENV.run_rollout({"prompt": row["prompt"], "example_id": 0, "answer": str(row["answer"])},
                                   vf.OpenAIChatCompletionsClient(client), "policy", sampling_args={})
    # a rollout verifiers aborts (an empty answer, a context overflow) keeps the calls made and scores 0
    return 0.0 if output.get("error") or output.get("reward") is None else float(output["reward"])
