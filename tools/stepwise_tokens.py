"""Tokens the forward passes see in each multi-turn mode (docs/agents.md, "Multi-turn modes"):
scripted episodes of the conformance suite, run through the real rollout with the real Qwen2
vocabulary and published templates of the llama-cpp-python sdist (cached by the test suite).

    python tools/stepwise_tokens.py
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from types import SimpleNamespace
import support_conformance as sc
from support_realtemplates import FAMILIES, template_dir, real_tokenizer
from steadyrl.agents.chat import render
from steadyrl.agents.parsers import TOOL_PARSERS
from steadyrl.rollout.episodes import run_episodes
t = template_dir()
for name, mode in [("Qwen3", "user"), ("Qwen3 (no thinking)", "tools"), ("QwQ", "tools")]:
    fam = next(f for f in FAMILIES if f.name == name)
    tok = real_tokenizer("qwen2", t); tok.chat_template = (t / fam.template).read_text()
    if tok.pad_token is None: tok.pad_token = tok.eos_token
    kwargs = fam.kwargs or None
    for tm in ("stepwise", "as_sampled"):
        tools = [sc.add_tool()] if mode == "tools" else None
        schemas = [x.schema for x in tools] if tools else None
        turns, conv = sc.script(tok, mode, schemas, list(fam.stops), kwargs, TOOL_PARSERS["hermes"], tm, [])
        if tools:
            agent = sc.ToolAgent(tools, TOOL_PARSERS["hermes"], timeout_s=5.0, isolation="inline"); agent.template_kwargs = kwargs or {}
        else:
            agent = sc.UserAgent(kwargs)
        agent.multi_turn_mode = tm
        text = render(tok, sc.PROMPT, tools=schemas, add_generation_prompt=True, template_kwargs=kwargs)
        p = SimpleNamespace(ids=tok(text, add_special_tokens=False)["input_ids"], columns={}, text=text, messages=sc.PROMPT, conversation=sc.PROMPT)
        gen = run_episodes(sc.TurnEngine(tok, turns), tok, [p], 1, agent=agent, limits=sc.LIMITS)
        info = gen.episodes[0]
        if tm == "stepwise":
            total = sum(len(s.context) + len(s.ids) for s in info.samples); trained = sum(len(s.ids) for s in info.samples)
        else:
            total = len(p.ids) + int(gen.response_mask[0].sum()); trained = int(gen.policy_mask[0].sum())
        print(f"{name:22s} {mode:5s} {tm:10s} turns {info.turns} rows {len(info.samples) if info.samples else 1} tokens in forward passes {total} trained {trained} drift {info.drift_tokens}")
