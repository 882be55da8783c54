"""The episode driver, with a scripted engine: exact tokens, exact masks, limits and faults.

The engine answers each context with the next scripted turn (chosen by how many assistant turns
the context already holds), so every token of an episode is known in advance: the tests check
the assembled ids against the chat template's own rendering of the conversation, that only the
sampled tokens are in ``policy_mask``, and how tools, environments and each limit end an episode.
"""

import pytest
import torch

from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.agents.parsers import load_parser
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool
from steadyrl.rollout.base import Generation, response_mask_from_ids
from steadyrl.rollout.episodes import TurnLimits, episode_metrics, run_episodes
from steadyrl.data.prompts import PromptFormat, prepare_prompts
from agents.templates import llama31, llama32_dated, qwen25

QWEN_HEADER, LLAMA_HEADER = "<|im_start|>assistant", "<|start_header_id|>assistant"


class ScriptedEngine:
    """``generate`` answers a context holding k assistant turns with ``script[k]`` (+ end token)."""

    def __init__(self, tokenizer, script: list[str], end: bool = True, header: str = QWEN_HEADER):
        self.tokenizer, self.script, self.end, self.header = tokenizer, script, end, header
        self.eos_ids = [tokenizer.eos_token_id]
        self.calls = []

    def generate(self, prompt_ids, n, *, max_new_tokens, **sampling):
        self.calls.append((len(prompt_ids), n, max_new_tokens))
        contexts = [p for p in prompt_ids for _ in range(n)]
        rows = []
        for ids in contexts:
            k = self.tokenizer.decode(ids).count(self.header) - 1
            text = self.script[min(k, len(self.script) - 1)]
            out = self.tokenizer(text, add_special_tokens=False)["input_ids"] + (self.eos_ids if self.end else [])
            rows.append(out[:max_new_tokens])
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        response = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask, truncated = response_mask_from_ids(response, self.eos_ids, max_new_tokens)
        mask = mask * (torch.arange(width) < torch.tensor([len(r) for r in rows]).unsqueeze(1))
        p = max(len(c) for c in contexts)
        prompt = torch.tensor([[pad] * (p - len(c)) + c for c in contexts])
        prompt_mask = torch.tensor([[0] * (p - len(c)) + [1] * len(c) for c in contexts])
        return Generation(prompt_ids=prompt, prompt_mask=prompt_mask, response_ids=response, response_mask=mask,
                          truncated=truncated, completions=self.tokenizer.batch_decode(rows, skip_special_tokens=True))


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
LIMITS = TurnLimits(max_turns=4, max_new_tokens=200, max_observation_tokens=200, observation_truncation="right",
                    episode_tokens=1000)


def tool_agent(isolation="inline", timeout_s=5.0, parser="hermes"):
    from transformers.utils import get_json_schema

    tools = [Tool(name="add", fn=add, schema=get_json_schema(add))]
    return ToolAgent(tools, load_parser(parser), timeout_s=timeout_s, isolation=isolation)


def prompts_for(tok, agent, texts=("What is 1+2?",)):
    form = PromptFormat(5000, chat_template=True, tools=agent.tool_schemas if agent else None)
    items, _ = prepare_prompts([{"prompt": t, "answer": "3"} for t in texts], tok, form, source="test")
    return items


LLAMA_CALL = '{"name": "add", "parameters": {"a": 1, "b": 2}}'


@pytest.mark.parametrize("make, parser, call, header, after_end", [
    (qwen25, "hermes", CALL, QWEN_HEADER, "\n"),
    (llama31, "llama3_json", LLAMA_CALL, LLAMA_HEADER, ""),
    (llama32_dated, "llama3_json", LLAMA_CALL, LLAMA_HEADER, ""),  # a date header rendered from today's date
])
def test_tool_episode_is_sampled_ids_plus_the_templates_observation(make, parser, call, header, after_end):
    tok = make()
    agent = tool_agent(parser=parser)
    prompts = prompts_for(tok, agent)
    gen = run_episodes(ScriptedEngine(tok, [call, "The answer is 3."], header=header), tok, prompts, 2,
                       agent=agent, limits=LIMITS)
    conversation = [*prompts[0].conversation, {"role": "assistant", "content": call},
                    {"role": "tool", "name": "add", "content": "3"},
                    {"role": "assistant", "content": "The answer is 3."}]
    rendered = tok.apply_chat_template(conversation, tools=agent.tool_schemas, tokenize=False)
    for i in range(2):
        ids = gen.prompt_ids[i][gen.prompt_mask[i].bool()].tolist() + gen.response_ids[i][gen.response_mask[i].bool()].tolist()
        assert tok.decode(ids) + after_end == rendered  # what the template writes after the last end token
    policy = gen.policy_mask[0][gen.response_mask[0].bool()].tolist()
    first = len(tok(call, add_special_tokens=False)["input_ids"]) + 1
    last = len(tok("The answer is 3.", add_special_tokens=False)["input_ids"]) + 1
    observation = len(policy) - first - last
    assert observation > 0 and policy == [1] * first + [0] * observation + [1] * last
    info = gen.episodes[0]
    assert (info.turns, info.tool_calls, info.drift_tokens, info.truncation) == (2, 1, 0, None)
    assert info.messages[1] == {"role": "tool", "name": "add", "content": "3", "tool_call_id": "call00000"}
    metrics = episode_metrics(gen.episodes, ["add"])
    assert metrics["rollout/retokenize_drift"] == 0.0 and metrics["rollout/turns_mean"] == 2.0
    assert metrics["rollout/tool_errors"] == 0.0


def test_without_an_agent_the_episode_is_the_single_turn_generation():
    tok = qwen25()
    prompts = prompts_for(tok, None)
    engine = ScriptedEngine(tok, ["3"])
    gen = run_episodes(engine, tok, prompts, 3, agent=None, limits=LIMITS)
    direct = engine.generate([p.ids for p in prompts], 3, max_new_tokens=200)
    assert torch.equal(gen.response_ids, direct.response_ids) and gen.policy_mask is None
    assert engine.calls[0] == (1, 3, 200)  # one call, the prompt once for its group


def test_an_agent_that_ends_at_once_gives_the_single_turn_tensors():
    tok = qwen25()
    agent = tool_agent()
    prompts = prompts_for(tok, agent)
    single = run_episodes(ScriptedEngine(tok, ["3"]), tok, prompts, 2, agent=None, limits=LIMITS)
    episode = run_episodes(ScriptedEngine(tok, ["3"]), tok, prompts, 2, agent=agent, limits=LIMITS)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "truncated"):
        assert torch.equal(getattr(single, name), getattr(episode, name)), name
    assert torch.equal(episode.policy_mask, single.response_mask)


def test_tool_errors_go_back_to_the_model_and_are_counted():
    tok = qwen25()
    agent = tool_agent()
    bad = '<tool_call>\n{"name": "mul", "arguments": {}}\n</tool_call><tool_call>\n{"name": "add", "arguments": {"a": "x"}}\n</tool_call>'
    gen = run_episodes(ScriptedEngine(tok, [bad, "<tool_call>\n{not json\n</tool_call>", "done"]), tok,
                       prompts_for(tok, agent), 1, agent=agent, limits=LIMITS)
    info = gen.episodes[0]
    assert info.turns == 3 and info.tool_errors == {"unknown": 1, "add": 1, "parse": 1}
    assert all(m["content"].startswith("Error") for m in info.messages if m["role"] == "tool")
    assert "unknown tool 'mul'" in info.messages[1]["content"]  # the model is told the name it wrote
    assert episode_metrics(gen.episodes, ["add"])["rollout/tool_errors/add"] == 1.0


def test_calls_to_made_up_tools_are_counted_under_one_key():
    tok = qwen25()
    agent = tool_agent()
    invented = [f'<tool_call>\n{{"name": "tool_{k}", "arguments": {{}}}}\n</tool_call>' for k in range(3)]
    gen = run_episodes(ScriptedEngine(tok, [*invented, "done"]), tok, prompts_for(tok, agent), 2, agent=agent,
                       limits=LIMITS)
    metrics = episode_metrics(gen.episodes, ["add"])
    assert sorted(k for k in metrics if k.startswith("rollout/tool_errors/")) == [
        "rollout/tool_errors/add", "rollout/tool_errors/unknown"]
    assert metrics["rollout/tool_errors/unknown"] == 6.0 and metrics["rollout/tool_errors"] == 6.0


def test_limits_truncate_episodes():
    tok = qwen25()
    agent = tool_agent()
    prompts = prompts_for(tok, agent)
    forever = ScriptedEngine(tok, [CALL])
    by_turns = run_episodes(forever, tok, prompts, 1, agent=agent, limits=LIMITS)
    assert by_turns.episodes[0].truncation == "max_turns" and bool(by_turns.truncated[0])
    assert by_turns.episodes[0].turns == LIMITS.max_turns
    short = TurnLimits(**{**LIMITS.__dict__, "episode_tokens": 100})
    by_tokens = run_episodes(forever, tok, prompts, 1, agent=agent, limits=short)
    assert by_tokens.episodes[0].truncation == "max_episode_tokens"
    assert int(by_tokens.response_mask.sum()) <= 100
    no_end = run_episodes(ScriptedEngine(tok, ["3"], end=False), tok, prompts, 1, agent=agent, limits=LIMITS)
    assert no_end.episodes[0].truncation == "max_new_tokens"


def test_long_observations_are_cut_to_the_limit():
    def shout(text: str) -> str:
        """Repeat a text.

        Args:
            text: what to repeat
        """
        return text * 500

    from transformers.utils import get_json_schema

    tok = qwen25()
    agent = ToolAgent([Tool("shout", shout, get_json_schema(shout))], load_parser("hermes"), timeout_s=5,
                      isolation="inline")
    call = '<tool_call>\n{"name": "shout", "arguments": {"text": "ab"}}\n</tool_call>'
    limits = TurnLimits(**{**LIMITS.__dict__, "max_observation_tokens": 60})
    gen = run_episodes(ScriptedEngine(tok, [call, "ok"]), tok, prompts_for(tok, agent), 1, agent=agent, limits=limits)
    info = gen.episodes[0]
    assert 0 < info.observation_tokens <= 60
    assert info.messages[1]["content"].startswith("abab") and len(info.messages[1]["content"]) < 100


class CountingEnv:
    """Rewards 1 per turn, done after the second; the first observation says the seed."""

    def reset(self, prompt, answer, seed):
        self.seed = seed
        return f"seed {seed % 1000}"

    def step(self, text):
        return "more", 1.0, text.strip() == "stop"


class CrashingEnv:
    def reset(self, **row):
        return None

    def step(self, text):
        raise RuntimeError("the game broke")


def test_environment_episodes_collect_turn_rewards_and_fail_alone():
    tok = qwen25()
    prompts = prompts_for(tok, None)
    agent = EnvironmentAgent(CountingEnv, observation_role="user", timeout_s=5, isolation="thread")
    gen = run_episodes(ScriptedEngine(tok, ["go", "stop"]), tok, prompts, 2, agent=agent, limits=LIMITS,
                       seeds=[11, 12])
    info = gen.episodes[0]
    assert info.turn_rewards == [1.0, 1.0] and info.env_reward == 2.0 and info.turns == 2
    assert tok.decode(gen.prompt_ids[0][gen.prompt_mask[0].bool()]).count("seed 11") == 1  # reset's observation
    assert tok.decode(gen.prompt_ids[1][gen.prompt_mask[1].bool()]).count("seed 12") == 1
    crash = EnvironmentAgent(CrashingEnv, observation_role="user", timeout_s=5, isolation="thread")
    failed = run_episodes(ScriptedEngine(tok, ["go"]), tok, prompts, 2, agent=crash, limits=LIMITS)
    assert all(e.failed and "the game broke" in e.error for e in failed.episodes)


def test_tools_in_process_isolation_run_and_time_out(tmp_path):
    import time

    def slow(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: how long
        """
        time.sleep(seconds)
        return "woke"

    from transformers.utils import get_json_schema

    tok = qwen25()
    agent = ToolAgent([Tool("slow", slow, get_json_schema(slow))], load_parser("hermes"), timeout_s=10.0,
                      isolation="process")
    calls = ['<tool_call>\n{"name": "slow", "arguments": {"seconds": 0.01}}\n</tool_call>',
             '<tool_call>\n{"name": "slow", "arguments": {"seconds": 30}}\n</tool_call>', "done"]
    gen = run_episodes(ScriptedEngine(tok, calls), tok, prompts_for(tok, agent), 1, agent=agent, limits=LIMITS)
    contents = [m["content"] for m in gen.episodes[0].messages if m["role"] == "tool"]
    assert contents[0] == "woke" and "timed out" in contents[1]
    assert gen.episodes[0].tool_errors == {"slow": 1}


def test_a_call_in_the_last_allowed_turn_is_not_run():
    ran = []

    def count(a: int, b: int) -> int:
        """Add and count the calls.

        Args:
            a: the first integer
            b: the second integer
        """
        ran.append((a, b))
        return a + b

    from transformers.utils import get_json_schema

    tok = qwen25()
    agent = ToolAgent([Tool("add", count, get_json_schema(count))], load_parser("hermes"), timeout_s=5,
                      isolation="inline")
    limits = TurnLimits(**{**LIMITS.__dict__, "max_turns": 2})
    gen = run_episodes(ScriptedEngine(tok, [CALL]), tok, prompts_for(tok, agent), 1, agent=agent, limits=limits)
    info = gen.episodes[0]
    assert (info.turns, info.truncation, info.tool_calls) == (2, "max_turns", 1)
    assert ran == [(1, 2)]  # the first turn's call ran; the second turn's result could never be read


class FakeLLM:
    """``vllm.LLM``'s interface over the scripted answers: token ids in (``prompt_token_ids``), token
    ids and per-token log-probs out, and a count of sleeps and wake-ups."""

    def __init__(self, tokenizer):
        self.scripted = ScriptedEngine(tokenizer, [CALL, "The answer is 3."])
        self.requests, self.sleeps, self.wakes = [], 0, 0

    def generate(self, requests, params, use_tqdm=False):
        from types import SimpleNamespace

        self.requests.append([r["prompt_token_ids"] for r in requests])
        outputs = []
        for r in requests:
            gen = self.scripted.generate([r["prompt_token_ids"]], params.n, max_new_tokens=params.max_tokens)
            completions = []
            for j in range(params.n):
                ids = gen.response_ids[j][gen.response_mask[j].bool()].tolist()
                completions.append(SimpleNamespace(index=j, token_ids=ids, finish_reason="stop",
                                                   logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in ids]))
            outputs.append(SimpleNamespace(outputs=completions))
        return outputs

    def sleep(self, level):
        self.sleeps += 1

    def wake_up(self):
        self.wakes += 1


def fake_vllm_engine(tok):
    from types import SimpleNamespace

    from steadyrl.rollout.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # no vllm, no GPU: the engine's own logic over FakeLLM
    engine.llm, engine.tokenizer, engine.eos_ids = FakeLLM(tok), tok, [tok.eos_token_id]
    engine.sleep_mode, engine._stale, engine._asleep, engine._held = True, False, False, 0
    engine._sampling_params = lambda **kwargs: SimpleNamespace(**kwargs)
    return engine


def test_vllm_episodes_are_token_ids_in_and_out_and_sleep_only_after_the_last_turn():
    tok = qwen25()
    agent = tool_agent()
    prompts = prompts_for(tok, agent)
    engine = fake_vllm_engine(tok)
    gen = run_episodes(engine, tok, prompts, 2, agent=agent, limits=LIMITS)
    same = run_episodes(ScriptedEngine(tok, [CALL, "The answer is 3."]), tok, prompts, 2, agent=agent, limits=LIMITS)
    for name in ("prompt_ids", "response_ids", "response_mask", "policy_mask", "truncated"):
        assert torch.equal(getattr(gen, name), getattr(same, name)), name
    # the second turn's prompt is exactly the first turn's sampled ids plus the observation's ids
    first, second = engine.llm.requests
    assert first == [list(prompts[0].ids)]
    for i, ids in enumerate(second):
        so_far = gen.response_ids[i][: len(ids) - len(first[0])].tolist()  # turn 1 + observation 1
        assert ids == first[0] + so_far
    # the engine's log-probs on the sampled tokens, 0 on the observation's
    policy = gen.policy_mask.bool()
    assert (gen.rollout_logprobs[policy] == -0.5).all() and (gen.rollout_logprobs[~policy] == 0).all()
    assert (engine.llm.sleeps, engine.llm.wakes) == (1, 0)  # two turns, one sleep at the end
    run_episodes(engine, tok, prompts, 2, agent=agent, limits=LIMITS)
    assert (engine.llm.sleeps, engine.llm.wakes) == (2, 1)
    engine.generate([list(prompts[0].ids)], 1, max_new_tokens=50)  # a single call still sleeps after itself
    assert (engine.llm.sleeps, engine.llm.wakes) == (3, 2)
