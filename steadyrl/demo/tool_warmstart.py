"""Supervised warm start of the tool demo: transcripts encoded the way the episode driver sees them.

A transcript (prompt, assistant turns, tool messages) becomes the token sequence a multi-turn
rollout produces, built piece by piece as the driver builds it, never by tokenizing the whole
rendered conversation at once (a BPE could merge across the pieces' borders):

    prompt      = encode(render(prompt messages, add_generation_prompt=True))
    turn        = encode(assistant content) + [<|im_end|>]              (labelled)
    observation = encode(render(.. + tool messages, add_generation_prompt=True)
                         minus the rendering up to the turn's <|im_end|>)   (not labelled)

Labels are the tokens on assistant turns (content and end-of-turn token), -100 elsewhere, so the
loss is the policy's own part of the episode, as in RL.
"""

from __future__ import annotations

import torch

from .warmstart import IGNORE_INDEX

__all__ = ["encode_transcript", "encode_transcripts"]


def _render(tokenizer, messages: list[dict], tools, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=generation_prompt,
                                         tokenize=False)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_transcript(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
    """``(ids, labels)`` of one transcript whose first assistant message follows the prompt."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise ValueError("a transcript needs prompt messages and then at least one assistant message")
    ids = _ids(tokenizer, _render(tokenizer, messages[:first], tools, True))
    labels = [IGNORE_INDEX] * len(ids)
    i = first
    while i < len(messages):
        if messages[i]["role"] != "assistant":
            raise ValueError(f"message {i} has role {messages[i]['role']!r}: the pieces after an assistant turn "
                             "must be followed by another assistant turn")
        turn = _ids(tokenizer, messages[i]["content"]) + [tokenizer.eos_token_id]
        ids += turn
        labels += turn
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j == len(messages):
            if j != i + 1:
                raise ValueError("a transcript must end with an assistant message")
            break
        before = _render(tokenizer, messages[: i + 1], tools, False)
        upto = before.rindex(tokenizer.eos_token) + len(tokenizer.eos_token)
        after = _render(tokenizer, messages[:j], tools, True)
        if after[:upto] != before[:upto]:
            raise ValueError("the chat template does not render a conversation as a prefix of its continuation")
        observation = _ids(tokenizer, after[upto:])
        ids += observation
        labels += [IGNORE_INDEX] * len(observation)
        i = j
    return ids, labels


def encode_transcripts(tokenizer, transcripts: list[list[dict]],
                       tools: list[dict] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, labels)``, each ``[N, L]``."""
    if not transcripts:
        raise ValueError("transcripts must not be empty")
    rows = [encode_transcript(tokenizer, t, tools) for t in transcripts]
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, (ids, label_row) in enumerate(rows):
        input_ids[k, : len(ids)] = torch.tensor(ids)
        labels[k, : len(ids)] = torch.tensor(label_row)
        attention_mask[k, : len(ids)] = 1
    return input_ids, attention_mask, labels
