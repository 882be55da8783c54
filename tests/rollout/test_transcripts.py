"""The transcript (``turns``) reward functions read: every sampled turn in it exactly once, as sampled.

Checked through :func:`steadyrl.rewards.scorer.score_episodes`, the path a training step takes:
a reward function receives ``turns`` and the test compares its assistant messages with the runs
of policy tokens in the episode's own tensors, whatever ended the episode (an answer, a turn cut
by ``max_new_tokens`` or ``max_episode_tokens``, the turn limit, an environment that failed).
"""

import pytest

from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.rewards import RewardSpec
from steadyrl.rollout.episodes import TurnLimits, run_episodes
from steadyrl.rewards.scorer import Scorer, score_episodes
from agents.templates import qwen25
from rollout.test_episodes import CALL, LIMITS, CrashingEnv, ScriptedEngine, prompts_for, tool_agent


def turns_seen(gen, samples) -> list[list[dict]]:
    """The ``turns`` a reward function receives for ``gen``."""
    seen = []

    def record(prompts, completions, turns, **columns):
        seen.extend(turns)
        return [0.0] * len(completions)

    scorer = Scorer([RewardSpec(name="record", fn=record, isolation="inline")])
    try:
        score_episodes(scorer, samples, gen, environment=False)
    finally:
        scorer.close()
    return seen


def sampled_turns(gen, tok, row: int) -> list[str]:
    """The text of each run of policy tokens of ``row`` (its end-of-turn token left out)."""
    ids = gen.response_ids[row][gen.response_mask[row].bool()].tolist()
    policy = gen.policy_mask[row][gen.response_mask[row].bool()].tolist()
    runs, current = [], []
    for token, sampled in zip(ids, policy):
        if sampled:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tok.decode(r[:-1] if r[-1] == tok.eos_token_id else r, skip_special_tokens=False) for r in runs]


def assistant_texts(turns: list[dict]) -> list[str]:
    return [m["content"] for m in turns if m["role"] == "assistant"]


class UnendedAfter(ScriptedEngine):
    """Scripted turns that lose their end-of-turn token after the first ``ended`` calls of generate."""

    def __init__(self, tokenizer, script, ended: int):
        super().__init__(tokenizer, script)
        self.ended = ended

    def generate(self, prompt_ids, n, *, max_new_tokens, **sampling):
        gen = super().generate(prompt_ids, n, max_new_tokens=max_new_tokens, **sampling)
        if len(self.calls) > self.ended:
            gen.response_mask[gen.response_ids == self.tokenizer.eos_token_id] = 0
        return gen


def short(**changes) -> TurnLimits:
    return TurnLimits(**{**LIMITS.__dict__, **changes})


CASES = {  # engine, limits, the truncation expected
    "answered": (lambda tok: ScriptedEngine(tok, [CALL, "The answer is 3."]), LIMITS, None),
    "max_new_tokens": (lambda tok: ScriptedEngine(tok, ["The answer is"], end=False), LIMITS, "max_new_tokens"),
    "max_new_tokens_after_a_call": (lambda tok: UnendedAfter(tok, [CALL, "The answer"], ended=1), LIMITS,
                                    "max_new_tokens"),
    # turn 1 (51 tokens) + its observation (54) leave 15 of 120 for turn 2: the call is cut
    "max_episode_tokens": (lambda tok: ScriptedEngine(tok, [CALL]), short(episode_tokens=120), "max_episode_tokens"),
    # no room for a turn after the observation: the episode ends before it, and so does its transcript
    "max_episode_tokens_at_an_observation": (lambda tok: ScriptedEngine(tok, [CALL]), short(episode_tokens=100),
                                             "max_episode_tokens"),
    "max_turns": (lambda tok: ScriptedEngine(tok, [CALL]), short(max_turns=2), "max_turns"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_sampled_turn_is_in_the_turns_once_as_sampled(case):
    make_engine, limits, truncation = CASES[case]
    tok = qwen25()
    agent = tool_agent()
    prompts = prompts_for(tok, agent)
    gen = run_episodes(make_engine(tok), tok, prompts, 2, agent=agent, limits=limits)
    turns = turns_seen(gen, [p for p in prompts for _ in range(2)])
    for row, info in enumerate(gen.episodes):
        assert info.truncation == truncation
        texts = assistant_texts(turns[row])
        assert len(texts) == info.turns and texts == sampled_turns(gen, tok, row)
    if case == "max_episode_tokens":  # the last turn is the cut text, not the whole call
        last = turns[0][-1]
        assert last["role"] == "assistant" and CALL.startswith(last["content"]) and last["content"] != CALL
    if case == "max_episode_tokens_at_an_observation":
        assert turns[0] == [{"role": "assistant", "content": CALL}] and gen.episodes[0].observation_tokens == 0
    if case == "max_new_tokens_after_a_call":
        assert turns[0][-1] == {"role": "assistant", "content": "The answer"}


class FailingReset:
    def reset(self, **row):
        raise RuntimeError("no game today")

    def step(self, text):
        return None, 0.0, True


@pytest.mark.parametrize("env", [FailingReset, CrashingEnv])
def test_a_failed_episode_keeps_its_sampled_turn(env):
    tok = qwen25()
    prompts = prompts_for(tok, None)
    agent = EnvironmentAgent(env, observation_role="user", timeout_s=5, isolation="thread")
    gen = run_episodes(ScriptedEngine(tok, ["go"]), tok, prompts, 2, agent=agent, limits=LIMITS)
    turns = turns_seen(gen, [p for p in prompts for _ in range(2)])
    for row, info in enumerate(gen.episodes):
        assert info.failed and info.turns == 1
        assert assistant_texts(turns[row]) == ["go"] == sampled_turns(gen, tok, row)
