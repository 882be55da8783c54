"""Step-wise samples (``rollout.multi_turn.mode: stepwise``): each turn generated from and trained on
the template's rendering of its history, the samples of an episode laid out in slots that share
its reward, and the drift check that re-renders every context."""

from types import SimpleNamespace

import torch

from steadyrl.agents.chat import render
from steadyrl.agents.environment import EnvironmentAgent
from steadyrl.config.schema import AlgorithmConfig
from steadyrl.rollout.episodes import TurnLimits, run_episodes
from steadyrl.rollout.stepwise import TurnSample, samples_generation, split_episodes, stepwise_drift
from steadyrl.trainer.processing import RewardInputs, RewardSettings, process_rewards
from agents.templates import qwen3
from rollout.test_episodes import ScriptedEngine, prompts_for

torch.set_num_threads(1)
LIMITS = TurnLimits(max_turns=3, max_new_tokens=64, max_observation_tokens=64, observation_truncation="right",
                    episode_tokens=1000)


class Feedback:
    """Answers every turn with 'wrong' until the third."""

    def reset(self, prompt, answer, seed):
        self.turns = 0
        return None

    def step(self, text):
        self.turns += 1
        return "wrong", float(self.turns == 3), self.turns >= 3


def _run(mode: str):
    tok = qwen3()
    agent = EnvironmentAgent(Feedback, observation_role="user", timeout_s=5, isolation="inline")
    agent.multi_turn_mode = mode
    engine = ScriptedEngine(tok, ["<think>\nr0\n</think>\n\n8", "<think>\nr1\n</think>\n\n6", "<think>\nr2\n</think>\n\n7"])
    engine.seen = []
    generate = engine.generate

    def recording(prompt_ids, n, **kw):
        engine.seen += [list(p) for p in prompt_ids for _ in range(n)]
        return generate(prompt_ids, n, **kw)

    engine.generate = recording
    prompts = prompts_for(tok, None, ["What is 3 + 4?"])
    gen = run_episodes(engine, tok, prompts, 2, agent=agent, limits=LIMITS)
    return tok, agent, engine, prompts, gen


def test_stepwise_turns_are_generated_from_and_trained_on_the_templates_rendering_of_their_history():
    tok, agent, engine, prompts, gen = _run("stepwise")
    info = gen.episodes[0]
    assert info.turns == 3 and len(info.samples) == 3 and info.drift_tokens == 0
    history = list(prompts[0].conversation)
    for k, sample in enumerate(info.samples):
        expected = prompts[0].ids if k == 0 else tok(render(tok, history, tools=None, add_generation_prompt=True),
                                                     add_special_tokens=False)["input_ids"]
        assert sample.context == expected  # what inference would feed the model: earlier <think> dropped
        assert sample.ids == tok(f"<think>\nr{k}\n</think>\n\n{'867'[k]}", add_special_tokens=False)["input_ids"] + [
            tok.eos_token_id]
        assert sample.context in engine.seen  # and what the engine was given
        # as a server's reasoning parser holds the turn: split at </think>, nothing stripped
        # (less the '\n\n' the template writes after its own </think>: whitespace it writes is not content)
        history += [{"role": "assistant", "reasoning_content": f"\nr{k}\n", "content": '867'[k]},
                    {"role": "user", "content": "wrong"}]
    assert "r0" not in tok.decode(info.samples[2].context)  # Qwen3 drops reasoning before the last user turn


def test_as_sampled_keeps_one_sequence_every_turn_was_sampled_from():
    tok, agent, engine, prompts, gen = _run("as_sampled")
    info = gen.episodes[0]
    row = prompts[0].ids + gen.response_ids[0][gen.response_mask[0].bool()].tolist()
    assert info.samples is None and info.drift_tokens == 0 and info.turns == 3
    assert all(row[:len(c)] == c for c in engine.seen[:1] + engine.seen[2:3])
    assert "r0" in tok.decode(row) and "r1" in tok.decode(row)  # as the policy saw them


def test_a_context_that_is_not_the_templates_rendering_counts_as_drift():
    tok, agent, engine, prompts, gen = _run("stepwise")

    history = list(prompts[0].conversation)
    for k in range(2):
        history += [{"role": "assistant", "content": f"<think>\nr{k}\n</think>\n\n{'86'[k]}"},
                    {"role": "user", "content": "wrong"}]
    # what the driver keeps of an episode: its contexts, its history, where each turn began in it
    # (its sampled ids, laid end to end here) and where each ended
    samples = gen.episodes[0].samples
    starts = [sum(len(s.ids) for s in samples[:k]) for k in range(3)]
    e = SimpleNamespace(info=SimpleNamespace(failed=False, turn_ends=[a + len(s.ids) - 1 for a, s in zip(
        starts, samples)]), contexts=[s.context for s in samples], history=history, marks=[1, 3, 5],
        starts=starts, ids=[i for s in samples for i in s.ids])
    assert stepwise_drift(tok, e, agent) == 0
    # turn 2's context changed by one token: no longer the template's rendering
    e.contexts[2] = e.contexts[2][:-1] + [e.contexts[2][-1] + 1]
    assert stepwise_drift(tok, e, agent) == 1


def test_split_episodes_lays_out_slots_per_episode_that_share_its_reward():
    tok, agent, engine, prompts, gen = _run("stepwise")
    out = split_episodes(gen, 4, tok.pad_token_id, tok)
    assert len(out) == 2 * 4
    lengths = out.response_mask.sum(-1).tolist()
    assert [n > 0 for n in lengths] == [True, True, True, False] * 2  # three turns, one empty slot each
    assert torch.equal(out.policy_mask, out.response_mask)
    assert out.rollout_logprobs is None  # the engine gave none: no zeros passed off as its log-probs
    # GRPO over the group's samples: every sample of an episode gets the episode's advantage
    scores = torch.tensor([1.0] * 4 + [0.0] * 4)
    valid = out.response_mask.any(-1)
    done = process_rewards(RewardInputs(scores, valid, out.policy_mask, out.truncated, 8), AlgorithmConfig())
    per_row = [float(done.advantages[i][out.policy_mask[i].bool()].mean()) if valid[i] else None for i in range(8)]
    assert per_row[0] == per_row[1] == per_row[2] > 0 > per_row[4] == per_row[5] == per_row[6]
    assert per_row[3] is None and done.loss_mask[3].sum() == 0 and done.loss_mask[7].sum() == 0


def test_samples_generation_left_pads_contexts_and_keeps_logprobs():
    gen = samples_generation([TurnSample([5, 6, 7], [8, 9], [-0.5, -1.0]), None, TurnSample([5], [3], [-2.0])], 0)
    assert gen.prompt_ids.tolist() == [[5, 6, 7], [0, 0, 0], [0, 0, 5]]
    assert gen.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 1]]
    assert gen.response_ids.tolist() == [[8, 9], [0, 0], [3, 0]]
    assert gen.rollout_logprobs.tolist() == [[-0.5, -1.0], [0.0, 0.0], [-2.0, 0.0]]
