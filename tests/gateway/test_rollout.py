"""rollout.multi_turn.agent episodes through the gateway on a tiny model: the trained ids are the served ids,
calls that extend the previous call's context make one trajectory, calls that do not are counted,
calls of all episodes are batched into one generate per wave, and failing agents fail only their
own episode."""

from __future__ import annotations

import sys

import pytest
import torch

from steadyrl.agents.parsers import load_parser
from steadyrl.gateway import GatewayAgent
from steadyrl.rewards.scorer import Scorer, score_episodes
from steadyrl.rollout.episodes import TurnLimits, episode_metrics

from .conftest import make_prompts

HTTP = '''
import json, time, urllib.request
CALLS = {}

def post(base_url, api_key, route, body):
    request = urllib.request.Request(base_url + route, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())
'''

APPEND = HTTP + '''
def run_episode(row, base_url, api_key):
    messages = list(row["prompt"])
    first = post(base_url, api_key, "/chat/completions",
                 {"messages": messages, "max_tokens": 8, "return_token_ids": True, "logprobs": True})
    messages += [first["choices"][0]["message"], {"role": "user", "content": "and 5*6?"}]
    second = post(base_url, api_key, "/chat/completions", {"messages": messages, "max_tokens": 8,
                                                           "return_token_ids": True, "logprobs": True})
    CALLS[row["index"]] = (first, second)
    return float(row["index"])
'''

REWRITE = HTTP + '''
SECOND = []

def run_episode(row, base_url, api_key):
    first = post(base_url, api_key, "/chat/completions", {"messages": list(row["prompt"]), "max_tokens": 6,
                                                          "return_token_ids": True})
    summary = [{"role": "user", "content": "summary: " + first["choices"][0]["message"]["content"][:5]}]
    second = post(base_url, api_key, "/chat/completions", {"messages": summary, "max_tokens": 6,
                                                           "return_token_ids": True})
    SECOND.append((second["prompt_token_ids"], second["choices"][0]["token_ids"]))
    return None
'''

FAILING = HTTP + '''
def run_episode(row, base_url, api_key):
    post(base_url, api_key, "/completions", {"prompt": "What is", "max_tokens": 3})
    if row["index"] == 0:
        raise RuntimeError("the agent broke")
    if row["index"] == 1:
        time.sleep(60)  # far past the limit below, however loaded the machine
    return 0.5
'''


def rollout(engine, tokenizer, spec, prompts, n=1, *, timeout_s=60.0, wave_wait_s=10.0, sampling=None):
    agent = GatewayAgent(spec, parser=load_parser("hermes"), concurrency=64, timeout_s=timeout_s,
                         wave_wait_s=wave_wait_s)
    limits = TurnLimits(max_turns=8, max_new_tokens=16, max_observation_tokens=64, observation_truncation="right",
                        episode_tokens=200)
    try:
        gen = agent.rollout(engine, tokenizer, prompts, n, limits,
                            **(sampling or {"temperature": 1.0, "top_p": 1.0, "top_k": 0}))
    finally:
        agent.shutdown()
    return agent, gen


def module_of(spec: str):
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == spec.rsplit(":", 1)[0])


def row(gen, i):
    prompt = gen.prompt_ids[i][gen.prompt_mask[i].bool()].tolist()
    valid = gen.response_mask[i].bool()
    return prompt, gen.response_ids[i][valid].tolist(), gen.policy_mask[i][valid].tolist()


def test_trained_ids_are_the_served_ids_and_appending_calls_make_one_trajectory(engine, tiny, agent_file):
    model, tokenizer = tiny
    torch.manual_seed(0)
    spec = agent_file(APPEND)
    prompts = make_prompts(tokenizer, [f"What is {i}*7?" for i in range(8)])
    agent, gen = rollout(engine, tokenizer, spec, prompts)
    calls = module_of(spec).CALLS
    appended = 0
    for i in range(8):
        first, second = calls[i]
        c1, c2 = first["choices"][0], second["choices"][0]
        p1, p2 = first["prompt_token_ids"], second["prompt_token_ids"]
        assert p1 == prompts[i].ids  # the first call renders what the build step rendered
        prompt, response, policy = row(gen, i)
        if c1["finish_reason"] == "stop":  # ended with its end token: the next call extends it
            appended += 1
            assert p2[: len(p1) + len(c1["token_ids"])] == p1 + c1["token_ids"]
            obs = p2[len(p1) + len(c1["token_ids"]):]
            assert prompt == p1 and response == c1["token_ids"] + obs + c2["token_ids"]
            assert policy == [1] * len(c1["token_ids"]) + [0] * len(obs) + [1] * len(c2["token_ids"])
            assert gen.episodes[i].non_append_calls == 0 and gen.episodes[i].turns == 2
        else:  # cut by max_tokens: no end token to continue after, a call of its own
            assert prompt == p2 and response == c2["token_ids"] and policy == [1] * len(response)
            assert gen.episodes[i].non_append_calls == 1
        assert gen.episodes[i].turns == 2  # every call of the episode, not only the trained row's
        assert gen.episodes[i].agent_reward == float(i) and gen.episodes[i].agent_calls == 2
    assert appended >= 1
    assert episode_metrics(gen.episodes)["rollout/agent/calls"] == 16.0


@pytest.mark.parametrize("n", [1, 3])  # 3: a group's first calls share one prefilled prompt
def test_returned_log_probs_are_the_sampled_tokens_log_probs_under_the_policy(engine, tiny, agent_file, n):
    model, tokenizer = tiny
    torch.manual_seed(1)
    spec = agent_file(APPEND)
    prompts = make_prompts(tokenizer, ["What is 3*7?", "What is 4*8?"])
    rollout(engine, tokenizer, spec, prompts, n=n)
    for first, _ in module_of(spec).CALLS.values():
        ids, choice = first["prompt_token_ids"], first["choices"][0]
        sampled = choice["token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids + sampled])).logits[0].float()
        expected = torch.log_softmax(logits, -1)[len(ids) - 1 : len(ids) - 1 + len(sampled)]
        expected = expected.gather(1, torch.tensor(sampled).unsqueeze(1)).squeeze(1)
        served = torch.tensor([t["logprob"] for t in choice["logprobs"]["content"]])
        torch.testing.assert_close(served, expected, atol=1e-4, rtol=1e-4)


def test_calls_that_rewrite_the_history_are_counted_and_the_last_call_is_trained(engine, tiny, agent_file):
    model, tokenizer = tiny
    torch.manual_seed(2)
    spec = agent_file(REWRITE)
    prompts = make_prompts(tokenizer, ["What is 2*9?", "What is 6*6?"])
    _, gen = rollout(engine, tokenizer, spec, prompts, n=2)
    served = module_of(spec).SECOND
    assert episode_metrics(gen.episodes)["rollout/agent/non_append_calls"] == 4.0
    for i in range(4):
        prompt, response, policy = row(gen, i)
        assert (prompt, response) in served and policy == [1] * len(response)  # the summary call, as served
        # turns: both calls of the episode (it counted only the last trajectory's: 1)
        assert gen.episodes[i].non_append_calls == 1 and gen.episodes[i].turns == 2


def test_calls_of_all_episodes_are_one_generate_per_wave(engine, tiny, agent_file):
    model, tokenizer = tiny
    calls = []
    generate = engine.generate

    def counting(prompt_ids, n, **kwargs):
        calls.append(len(prompt_ids))
        return generate(prompt_ids, n, **kwargs)

    engine.generate = counting
    torch.manual_seed(3)
    rollout(engine, tokenizer, agent_file(APPEND), make_prompts(tokenizer, [f"q{i}" for i in range(8)]))
    assert calls == [8, 8]  # two waves, every episode's call in each


def test_an_agent_that_raises_or_times_out_fails_only_its_own_episode(engine, tiny, agent_file):
    model, tokenizer = tiny
    prompts = make_prompts(tokenizer, [f"q{i}" for i in range(4)])
    _, gen = rollout(engine, tokenizer, agent_file(FAILING), prompts, timeout_s=8.0, wave_wait_s=0.05)
    e = gen.episodes
    assert e[0].failed and "RuntimeError: the agent broke" in e[0].error and not e[0].timed_out
    assert "Traceback (most recent call last)" in e[0].error and "in run_episode" in e[0].error  # where it raised
    assert e[1].failed and e[1].timed_out and "rollout.multi_turn.agent_timeout_s" in e[1].error
    assert not e[2].failed and e[2].agent_reward == 0.5 and not e[3].failed
    metrics = episode_metrics(e)
    assert metrics["rollout/agent/timeouts"] == 1.0 and metrics["rollout/agent/errors"] == 1.0
    assert metrics["rollout/failed_episodes"] == 2.0 and metrics["rollout/failed_episode_frac"] == 0.5
    result = score_episodes(Scorer([], allow_empty=True), prompts, gen, environment=False)
    assert result.valid.tolist() == [False, False, True, True]
    assert result.scores.tolist() == [0.0, 0.0, 0.5, 0.5]


def test_an_async_agent_with_the_openai_client(engine, tiny, agent_file):
    pytest.importorskip("openai")
    model, tokenizer = tiny
    source = '''
async def run_episode(row, client):
    reply = await client.chat.completions.create(model="policy", messages=row["prompt"], max_tokens=5, n=2,
                                                 logprobs=True)
    text = await client.completions.create(model="policy", prompt="What is", max_tokens=3, temperature=0)
    assert len(reply.choices) == 2 and reply.choices[0].logprobs.content is not None
    assert text.choices[0].finish_reason in ("stop", "length")
    return 1.0 if reply.choices[0].message.content else 0.0
'''
    torch.manual_seed(4)
    _, gen = rollout(engine, tokenizer, agent_file(source), make_prompts(tokenizer, ["a", "b"]), wave_wait_s=0.05)
    assert not any(e.failed for e in gen.episodes), [e.error for e in gen.episodes]
    assert all(e.agent_calls == 2 for e in gen.episodes)
    assert episode_metrics(gen.episodes)["rollout/agent/non_append_calls"] == 2.0  # the text call is another context


def test_calls_with_the_same_prompt_are_one_prompt_sampled_for_each():
    from steadyrl.gateway.waves import shared_prompts

    prompts, copies, rows = shared_prompts([[1, 2], [3], [1, 2], [3]], 2)
    assert prompts == [[1, 2], [3]] and copies == 4
    assert [list(r) for r in rows] == [[0, 1], [4, 5], [2, 3], [6, 7]]  # each call its own rows of its prompt
    assert shared_prompts([[1], [1], [2]], 1)[1:] == (1, [range(0, 1), range(1, 2), range(2, 3)])  # unequal counts
    assert shared_prompts([[1], [1]], 2, sample=False) == ([[1], [1], [1], [1]], 1, [range(0, 2), range(2, 4)])


def test_the_gateway_stops_listening_when_the_agent_shuts_down(engine, tiny, agent_file):
    import urllib.error
    import urllib.request

    model, tokenizer = tiny
    agent = GatewayAgent(agent_file(FAILING), parser=load_parser("hermes"), concurrency=4, timeout_s=30)
    limits = TurnLimits(max_turns=8, max_new_tokens=8, max_observation_tokens=64, observation_truncation="right",
                        episode_tokens=64)
    agent.rollout(engine, tokenizer, make_prompts(tokenizer, ["q2"]), 1, limits, temperature=1.0)
    url = agent.gateway.base_url("any") + "/models"
    agent.shutdown()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


def test_an_interrupted_rollout_cancels_its_episodes_and_the_next_one_runs(engine, tiny, agent_file):
    model, tokenizer = tiny
    spec = agent_file(APPEND)
    agent = GatewayAgent(spec, parser=load_parser("hermes"), concurrency=8, timeout_s=60, wave_wait_s=0.05)
    limits = TurnLimits(max_turns=8, max_new_tokens=8, max_observation_tokens=64, observation_truncation="right",
                        episode_tokens=64)
    generate = engine.generate

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    engine.generate = broken
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.rollout(engine, tokenizer, make_prompts(tokenizer, ["a", "b"]), 2, limits, temperature=1.0)
        engine.generate = generate
        gen = agent.rollout(engine, tokenizer, make_prompts(tokenizer, ["c"]), 2, limits, temperature=1.0)
    finally:
        agent.shutdown()
    assert [e.failed for e in gen.episodes] == [False, False] and all(e.agent_calls == 2 for e in gen.episodes)


def test_an_episode_that_rewrote_its_history_trains_each_trajectory_sharing_its_reward(engine, tiny, agent_file):
    from types import SimpleNamespace

    from steadyrl.trainer.dynamic import StepSamples
    from steadyrl.trainer.turn_samples import expand_turn_samples, needs_turn_samples

    model, tokenizer = tiny
    torch.manual_seed(2)
    spec = agent_file(REWRITE)
    prompts = make_prompts(tokenizer, ["What is 2*9?", "What is 6*6?"])
    agent, gen = rollout(engine, tokenizer, spec, prompts, n=2)
    served = module_of(spec).SECOND
    for e in gen.episodes:  # the first call's trajectory, then the summary call's, each as served
        assert len(e.samples) == 2
        first, second = e.samples
        assert (first.context, first.ids) not in served and (second.context, second.ids) in served
        assert first.policy == [1] * len(first.ids) and second.policy == [1] * len(second.ids)
    valid = torch.ones(len(gen), dtype=torch.bool)
    result = SimpleNamespace(valid=valid, select=lambda rows: SimpleNamespace(valid=valid[torch.tensor(rows)],
                                                                               rows=rows))
    drawn = StepSamples(prompts=prompts, samples=list(range(len(gen))), gen=gen, result=result, selected=None,
                        generate_s=0.0, score_s=0.0, metrics={})
    assert needs_turn_samples(agent, drawn)
    expanded, slots = expand_turn_samples(drawn, tokenizer)
    assert slots == 2 and len(expanded.gen) == 2 * len(gen)
    assert expanded.result.rows == [0, 0, 1, 1, 2, 2, 3, 3]  # each trajectory carries its episode's score
    for i, e in enumerate(gen.episodes):
        for k, sample in enumerate(e.samples):
            r = i * 2 + k
            prompt = expanded.gen.prompt_ids[r][expanded.gen.prompt_mask[r].bool()].tolist()
            response = expanded.gen.response_ids[r][expanded.gen.response_mask[r].bool()].tolist()
            assert (prompt, response) == (sample.context, sample.ids)
            assert expanded.gen.policy_mask[r].sum() == len(sample.ids)


def test_a_step_whose_episodes_each_made_one_trajectory_keeps_one_row_per_episode(engine, tiny, agent_file):
    from types import SimpleNamespace

    from steadyrl.trainer.turn_samples import needs_turn_samples

    model, tokenizer = tiny
    torch.manual_seed(0)
    spec = agent_file(APPEND)
    agent, gen = rollout(engine, tokenizer, spec, make_prompts(tokenizer, ["What is 2*9?"]), n=2)
    assert all(len(e.samples) == 1 for e in gen.episodes)
    assert not needs_turn_samples(agent, SimpleNamespace(gen=gen))
