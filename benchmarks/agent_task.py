"""The tiny tool task of ``bench_agents``: add two numbers with an ``add`` tool, on a tiny model.

A prompt asks ``What is 23+45?``; the tool-using answer is one tool call, its result, and the sum::

    <|im_start|>assistant\\n<tool_call>\\n{"name": "add", "arguments": {"a": 23, "b": 45}}\\n</tool_call><|im_end|>
    \\n<|im_start|>user\\n<tool_response>\\n68\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n
    68<|im_end|>

The tokenizer is the character tokenizer of ``tests/agents/templates.py`` carrying its Qwen2.5
look-alike chat template (which renders these conversations character for character like the real
Qwen2.5-Instruct template, the copy TRL ships included), and the model the demo's 2-layer Llama. A
tiny random model never writes a tool call, so :func:`prepare` warm-starts it briefly on whole
episodes (loss on the policy's tokens only, the observation rendered by the rollout's own
``observation_ids``) until it calls the tool some of the time; RL then has something to improve.

* :func:`add`: the tool (type hints and a docstring: its schema is what the template shows);
* :func:`answer_reward`: 1 when the episode's last assistant message is the sum, else 0;
* :func:`prepare`: the tokenizer, the warm-started model and the prompt files, saved to a directory;
* :func:`play`: episodes one at a time with HF ``generate`` (held-out success, and the plain loop).
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import torch

SEED = 0
MAX_POSITIONS = 1024
TOOL_SPEC = "benchmarks.agent_task:add"
REWARD_SPEC = "benchmarks.agent_task:answer_reward"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def _last_answer(messages) -> str | None:
    """The content of the last message when it is an assistant message without a tool call."""
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls") or "<tool_call>" in (last.get("content") or ""):
        return None
    return str(last.get("content") or "").strip()


def answer_reward(prompts, completions, answer, turns=None, **columns) -> list[float]:
    """1.0 when the episode ends with an assistant message that is exactly the sum. steadyrl passes
    the transcript as ``turns``; TRL passes it as ``completions`` (lists of messages)."""
    transcripts = turns if turns is not None else completions
    return [float(_last_answer(t) == str(a)) for t, a in zip(transcripts, answer)]


def make_rows(n: int, seed: int) -> list[dict]:
    """Two-digit addends with a two-digit sum (10..49 each): every digit the model copies (into the
    call, then from the tool's result into the answer) sits at a fixed distance behind it."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 49), rng.randint(10, 49)
        rows.append({"prompt": [{"role": "user", "content": f"What is {a}+{b}?"}], "answer": str(a + b),
                     "a": a, "b": b})
    return rows


_PIECE = re.compile(r" ?[A-Za-z_]{2,}|<[a-z_/]+>|[{}\[\]\":,.]+ ?|\n+")


def build_tokenizer():
    """The test suite's character tokenizer with its Qwen2.5 look-alike template, plus word pieces:
    every word (with its leading space) and run of JSON punctuation of a rendered episode becomes
    one token, digits stay single characters. A prompt is then ~200 tokens, an episode ~50, about
    what Qwen2.5's BPE makes of them (the bare character tokenizer: ~750 and ~130)."""
    from tests.agents.templates import QWEN25, SPECIAL_TOKENS, chat_tokenizer

    tokenizer = chat_tokenizer(QWEN25, bos="<|begin_of_text|>")  # the tiny model wants a BOS id; none is added
    row = make_rows(1, 0)[0]
    text = tokenizer.apply_chat_template(row["prompt"], tools=tool_schemas(), add_generation_prompt=True,
                                         tokenize=False) + _call_text(1, 2) + "<tool_response>\n</tool_response>"
    for special in SPECIAL_TOKENS:
        text = text.replace(special, "\n")
    pieces = {p for p in _PIECE.findall(text) if not re.search(r"\d", p)}
    tokenizer.add_tokens(sorted(pieces, key=lambda p: (-len(p), p)))
    return tokenizer


def _call_text(a, b) -> str:
    return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def tool_schemas() -> list[dict]:
    from transformers.utils import get_json_schema

    return [get_json_schema(add)]


def prompt_ids(tokenizer, messages, tools: list[dict] | None | str = "add") -> list[int]:
    tools = tool_schemas() if tools == "add" else tools
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def observation(tokenizer, history, assistant_text: str, tool_messages, tools: list[dict] | None | str = "add"):
    """The tokens after a sampled turn: the rollout's own rendering (``steadyrl.agents.chat``)."""
    from steadyrl.agents.chat import observation_ids

    tools = tool_schemas() if tools == "add" else tools
    return observation_ids(tokenizer, history, assistant_text, tool_messages, tools=tools,
                           end_texts=[tokenizer.eos_token])


def _episode(tokenizer, row, tools: bool = True) -> tuple[list[int], list[int]]:
    """One tool-using episode as (ids, loss mask): prompt, call, observation, answer. ``tools=False``
    renders it without the tools' system prompt (~40 tokens instead of ~250)."""
    end = tokenizer.eos_token
    schemas = tool_schemas() if tools else None
    call = _call_text(row["a"], row["b"])
    p = prompt_ids(tokenizer, row["prompt"], schemas)
    c = tokenizer(call + end, add_special_tokens=False)["input_ids"]
    o = observation(tokenizer, row["prompt"], call, [{"role": "tool", "name": "add", "content": row["answer"]}],
                    schemas)
    a = tokenizer(row["answer"] + end, add_special_tokens=False)["input_ids"]
    return p + c + o + a, [0] * len(p) + [1] * len(c) + [0] * len(o) + [1] * len(a)


def warm_start(model, tokenizer, rows, *, steps: int, lr: float, batch_size: int, seed: int,
               tools: bool = True) -> list[float]:
    """Supervised steps on whole episodes, loss on the policy's tokens; returns the losses."""
    encoded = [_episode(tokenizer, r, tools) for r in rows]
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [encoded[i] for i in torch.randint(len(encoded), (batch_size,), generator=g).tolist()]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attn = torch.zeros((batch_size, width), dtype=torch.long)
        for i, (x, m) in enumerate(batch):
            ids[i, : len(x)] = torch.tensor(x)
            attn[i, : len(x)] = 1
            labels[i, : len(x)] = torch.where(torch.tensor(m).bool(), torch.tensor(x), -100)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def _tool_messages(text: str) -> tuple[list[dict], int] | None:
    """The tool messages answering a turn (``None``: no call, the episode is over) and the call count."""
    from steadyrl.agents.parsers import parse_hermes

    turn = parse_hermes(text)
    if not turn.calls and not turn.errors:
        return None
    messages = [{"role": "tool", "name": "parse", "content": f"Error: {e}"} for e in turn.errors]
    for call in turn.calls:
        try:
            result = str(add(**call.arguments)) if call.name == "add" else f"Error: unknown tool {call.name!r}"
        except Exception as err:  # noqa: BLE001 - wrong arguments: the model sees the error
            result = f"Error: {err}"
        messages.append({"role": "tool", "name": call.name, "content": result})
    return messages, len(turn.calls)


@torch.no_grad()
def play(model, tokenizer, row: dict, *, max_new_tokens: int, max_turns: int, episode_tokens: int,
         do_sample: bool, temperature: float = 1.0) -> dict:
    """One episode of ``row`` with HF ``generate``, one turn at a time: the sampled ids are kept as
    they are and each observation's ids appended after them (nothing is re-tokenised). Returns the
    ids after the prompt, the policy mask, the messages, the tool calls and the reward."""
    prompt = prompt_ids(tokenizer, row["prompt"])
    eos = tokenizer.eos_token_id
    ids, policy, history, messages, calls = [], [], list(row["prompt"]), [], 0
    for turn in range(max_turns):
        budget = min(max_new_tokens, episode_tokens - len(ids))
        x = torch.tensor([prompt + ids])
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=budget, do_sample=do_sample,
                             temperature=temperature if do_sample else None, top_p=None, top_k=None,
                             eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        new = out[0, x.shape[1]:].tolist()
        ended = eos in new
        new = new[: new.index(eos) + 1] if ended else new
        ids += new
        policy += [1] * len(new)
        text = tokenizer.decode(new[:-1] if ended else new, skip_special_tokens=False)
        messages.append({"role": "assistant", "content": text})
        if not ended:
            break
        reply = _tool_messages(text)
        if reply is None or turn == max_turns - 1:
            break
        tool_messages, n = reply
        calls += n
        obs = observation(tokenizer, history, text, tool_messages)
        if len(ids) + len(obs) + 1 > episode_tokens:
            break
        history += [{"role": "assistant", "content": text}, *tool_messages]
        messages += tool_messages
        ids += obs
        policy += [0] * len(obs)
    reward = answer_reward(None, None, [row["answer"]], turns=[messages])[0]
    return {"prompt": prompt, "ids": ids, "policy": policy, "messages": messages, "tool_calls": calls,
            "reward": reward}


def heldout_success(model, tokenizer, rows: list[dict], **limits) -> dict:
    """Greedy episodes on ``rows``: the fraction answered right and the tool calls per episode."""
    model.eval()
    eps = [play(model, tokenizer, r, do_sample=False, **limits) for r in rows]
    return {"success": sum(e["reward"] for e in eps) / len(eps),
            "tool_calls": sum(e["tool_calls"] for e in eps) / len(eps)}


def prepare(model_dir: Path, *, warm_steps: tuple[int, int] = (300, 30), n_train: int = 2000,
            n_heldout: int = 200) -> dict:
    """Tokenizer, warm-started model and prompt files (``train.jsonl``, ``heldout.jsonl``) in
    ``model_dir``, kept when already there; returns what ``bench_info.json`` records."""
    info_path = model_dir / "bench_info.json"
    if info_path.is_file():
        return json.loads(info_path.read_text())
    from steadyrl.demo.model import build_tiny_model

    start = time.perf_counter()
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer, n_layers=2, hidden_size=128, n_heads=4, seed=SEED,
                             max_positions=MAX_POSITIONS)
    train, heldout = make_rows(n_train, SEED), make_rows(n_heldout, SEED + 1)
    short, full = warm_steps
    losses = warm_start(model, tokenizer, train, steps=short, lr=1e-3, batch_size=32, seed=SEED, tools=False)
    losses += warm_start(model, tokenizer, train, steps=full, lr=1e-3, batch_size=16, seed=SEED + 1)
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", heldout)):
        (model_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"vocab": len(tokenizer), "prompt_tokens": len(prompt_ids(tokenizer, train[0]["prompt"])),
            "warm_steps": list(warm_steps), "warm_loss": [losses[0], losses[-1]] if losses else None,
            "warm_s": time.perf_counter() - start}
    info_path.write_text(json.dumps(info))
    return info


def read_rows(model_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (model_dir / name).read_text().splitlines() if line.strip()]
