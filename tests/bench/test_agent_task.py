"""The tool task of ``benchmarks/bench_agents.py``: its reward reads both trainers' transcripts, its
warm-start episodes are the rollout's exact tokens, and ``play`` keeps sampled ids as sampled."""

from __future__ import annotations

import pytest

from benchmarks import agent_task as task

CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "add", "arguments": {"a": 23, "b": 45}}}]}


def test_reward_reads_steadyrl_turns_and_trl_message_lists():
    tool = {"role": "tool", "name": "add", "content": "68"}
    done = [{"role": "assistant", "content": '<tool_call>\n{"name": "add"}\n</tool_call>'}, tool,
            {"role": "assistant", "content": " 68 "}]
    assert task.answer_reward(None, ["text"], ["68"], turns=[done]) == [1.0]  # steadyrl: turns=
    assert task.answer_reward(None, [[CALL, tool, {"role": "assistant", "content": "68"}]], ["68"]) == [1.0]  # TRL
    assert task.answer_reward(None, [[CALL]], ["68"]) == [0.0]  # ended on a call: no answer
    assert task.answer_reward(None, None, ["68", "68"], turns=[done[:1], []]) == [0.0, 0.0]
    assert task.answer_reward(None, None, ["69"], turns=[done]) == [0.0]


@pytest.fixture(scope="module")
def tokenizer():
    return task.build_tokenizer()


def test_word_pieces_shorten_the_prompt_and_round_trip(tokenizer):
    row = task.make_rows(1, 3)[0]
    ids, mask = task._episode(tokenizer, row)
    assert tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] == ids
    assert 150 < len(task.prompt_ids(tokenizer, row["prompt"])) < 300  # ~750 characters
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert trained == (f'<tool_call>\n{{"name": "add", "arguments": {{"a": {row["a"]}, "b": {row["b"]}}}}}\n'
                       f'</tool_call><|im_end|>{row["answer"]}<|im_end|>')


def test_episode_is_what_the_template_renders(tokenizer):
    row = task.make_rows(1, 4)[0]
    ids, _ = task._episode(tokenizer, row)
    conversation = row["prompt"] + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": row["a"], "b": row["b"]}}}]},
        {"role": "tool", "name": "add", "content": row["answer"]},
        {"role": "assistant", "content": row["answer"]}]
    rendered = tokenizer.apply_chat_template(conversation, tools=task.tool_schemas(), tokenize=False)
    assert rendered == tokenizer.decode(ids) + "\n"  # the template writes "\n" after the last <|im_end|>


def test_play_keeps_sampled_ids_and_marks_only_them(tokenizer):
    from steadyrl.demo.model import build_tiny_model

    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, seed=0,
                             max_positions=task.MAX_POSITIONS)
    row = task.make_rows(1, 5)[0]
    episode = task.play(model, tokenizer, row, max_new_tokens=6, max_turns=2, episode_tokens=12, do_sample=True)
    assert len(episode["policy"]) == len(episode["ids"]) <= 12
    assert episode["messages"][0]["role"] == "assistant" and episode["reward"] in (0.0, 1.0)
    first_turn = tokenizer.decode(episode["ids"][: sum(episode["policy"][:6])], skip_special_tokens=False)
    assert first_turn.startswith(episode["messages"][0]["content"])
