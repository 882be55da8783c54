"""The task of ``benchmarks/bench_smollm2.py``: its reward reads steadyrl's text completions and TRL's
message lists alike, and its prompts are chat messages whose gold answer is the larger number."""

from __future__ import annotations

from benchmarks import smollm2_task as task


def test_reward_scores_the_last_answer_the_form_alone_and_nothing():
    golds = ["17", "17", "17", "17"]
    texts = ["The answer is 17.", "The answer is 8. No wait. The answer is 17", "The answer is 8.", "17"]
    assert task.larger_reward(None, texts, golds) == [1.0, 1.0, 0.2, 0.0]


def test_reward_reads_trl_message_lists():
    said = [[{"role": "assistant", "content": "The answer is 96."}], [{"role": "assistant", "content": None}]]
    assert task.larger_reward(None, said, ["96", "96"]) == [1.0, 0.0]


def test_records_are_seeded_chat_prompts_with_the_larger_number_as_answer():
    rows = task.records(50, seed=3)
    assert rows == task.records(50, seed=3) and rows != task.records(50, seed=4)
    for row in rows:
        (message,) = row["prompt"]
        a, b = (int(x) for x in message["content"].split("larger, ")[1].split("?")[0].split(" or "))
        assert message["role"] == "user" and a != b and row["answer"] == str(max(a, b))
