"""Fixtures of the gateway tests: a tiny chat model (the tool demo's tokenizer and model, random
weights, no download), an engine over it, and prompts as the build step makes them."""

from __future__ import annotations

import pytest
import torch

from steadyrl.data.prompts import PromptItem

torch.set_num_threads(1)

CORPUS = ["<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n408<|im_end|>\n",
          "<|im_start|>user\nadd 1 and 2<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
          '{"name": "calculate", "arguments": {"expression": "1+2"}}\n</tool_call><|im_end|>\n']


@pytest.fixture(scope="session")
def tiny():
    """``(model, tokenizer)``: a one-layer chat model over a small BPE vocabulary."""
    from steadyrl.demo.chat_tokenizer import build_chat_tokenizer
    from steadyrl.demo.model import build_tiny_model

    tokenizer = build_chat_tokenizer(CORPUS * 20)
    model = build_tiny_model(tokenizer, n_layers=1, hidden_size=32, n_heads=2, max_positions=256, seed=0)
    # a bias on the end-of-turn token: about half the turns end within a few tokens (random weights
    # alone almost never end one), so calls that extend an ended turn happen
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = 5.0
    model.lm_head = head
    model.config.tie_word_embeddings = False
    return model, tokenizer


@pytest.fixture()
def engine(tiny):
    from steadyrl.rollout.hf import HFEngine

    model, tokenizer = tiny
    return HFEngine(model, tokenizer)


def make_prompts(tokenizer, questions: list[str]) -> list[PromptItem]:
    out = []
    for i, q in enumerate(questions):
        messages = [{"role": "user", "content": q}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(PromptItem(text=text, ids=tokenizer(text, add_special_tokens=False)["input_ids"],
                              columns={"index": i}, messages=messages, conversation=messages))
    return out


@pytest.fixture()
def agent_file(tmp_path):
    """``agent_file(source) -> spec``: an agent module written to a file, as a user gives it."""
    def write(source: str, name: str = "run_episode") -> str:
        path = tmp_path / f"agent_{abs(hash(source))}.py"
        path.write_text(source)
        return f"{path}:{name}"
    return write
