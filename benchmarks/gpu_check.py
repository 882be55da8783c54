"""The precision check for a GPU (issue 29): does each precision setting learn, how fast, in how much memory.

    python -m benchmarks.gpu_check                       # one GPU, < 5 minutes, no downloads
    python -m benchmarks.gpu_check --tiny --device cpu   # the same logic on a tiny model (the test)

The model is a random-weight Qwen2.5-0.5B-shaped ``Qwen2ForCausalLM`` (hidden 896, 24 layers, 14
heads, 2 KV heads, intermediate 4864, vocabulary 151936; every matrix ~N(0, 0.02), as
``initializer_range``), built from its config in memory: nothing is downloaded. The prompts are
random token ids (``--prompts`` x ``--prompt-len``), so no tokenizer is needed. Each setting gets
the same fresh model and the same step, twice::

    generate group_size samples per prompt (--new-tokens, the policy itself, sampling)
    rewards ~ U(0, 1) per sample (seeded) -> GRPO advantages (group mean / std)
    one update of the whole batch (steadyrl's ppo_update: one optimizer step), lr --lr (1e-6)

and reports: the fraction of trained weights moved after the 2 steps (float32 trained values: the
weights, or bf16 + Kahan compensation, or the master copy), seconds per step (mean of the 2),
peak CUDA memory (``max_memory_allocated``; CPU: n/a) and the bytes of weights + optimizer state
(counted from the tensors). ``--device cpu`` emulates the CUDA default (float32 weights under
bfloat16 autocast on the CPU). Beside them, when ``trl`` is importable, TRL's ``GRPOTrainer``
(``bf16=True`` on CUDA) on the same prompts and reward for 2 steps. Prints a markdown table.

Then (issue 36, :mod:`benchmarks.gpu_check_speed`) log-prob time and memory at 8k / 32k / 131k tokens
per log-prob path against naive and TRL, and generation tokens/s per HF engine setting;
``--sections`` picks the parts (default all three).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

SETTINGS = [("float32", "kahan"), ("auto", "kahan"), ("bfloat16", "plain"), ("bfloat16", "kahan"),
            ("bfloat16", "stochastic_rounding"), ("bfloat16", "master")]
"""``(model.dtype, model.bf16_update)`` measured; bfloat16 + plain is the old CUDA default."""

QWEN_0_5B = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "intermediate_size": 4864, "vocab_size": 151936}
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 256}


def build_model(shape: dict, seed: int = 0):
    """A random Qwen2 of ``shape``, float32, every matrix ~N(0, 0.02), dropout off."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**shape, max_position_embeddings=2048, initializer_range=0.02,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return Qwen2ForCausalLM(config)  # Qwen2's attention dropout is 0 by default


def _plan(dtype: str, update: str):
    """The CUDA plan of the setting, also on the CPU (bfloat16 autocast there computes like the GPU)."""
    from steadyrl.precision import precision_plan

    return precision_plan(dtype, update, "cuda")


def _config(args, dtype: str, update: str):
    from steadyrl.config import load_config

    plain_ok = [f"optim.lr={max(args.lr, 1e-4)}"] if update == "plain" else []  # refused below 6.1e-5: built anyway
    cfg = load_config(None, ["algorithm.kl_mode=none", f"trainer.device={args.device}",
                             f"model.dtype={dtype}", f"model.bf16_update={update}",
                             f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.new_tokens}",
                             "algorithm.advantage_estimator=grpo", *plain_ok])
    return cfg


def state_bytes(model, optimizer) -> int:
    """Bytes of the weights, their gradients' dtype and every optimizer state tensor."""
    import torch

    total = sum(p.numel() * p.element_size() * (2 if p.requires_grad else 1) for p in model.parameters())
    for state in optimizer.state.values():
        total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    return total


def _step_batch(model, prompts, args, generator):
    """Generate, reward and advantage -> a TrainBatch of the whole step."""
    import torch

    from steadyrl.functional.advantages import grpo_advantages
    from steadyrl.trainer.batch import TrainBatch

    ids = prompts.repeat_interleave(args.group, 0)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, top_p=1.0,
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0)
    response = out[:, ids.shape[1]:]
    response_mask = torch.ones_like(response)
    scores = torch.rand(ids.shape[0], generator=generator).to(ids.device)
    advantages = grpo_advantages(scores, response_mask.float(), args.group)
    full = torch.cat([mask, response_mask], 1)
    return TrainBatch(input_ids=out, attention_mask=full, position_ids=(full.cumsum(-1) - 1).clamp(min=0),
                      response_ids=response, response_mask=response_mask, loss_mask=response_mask.float(),
                      advantages=advantages.float()).to("cpu")


def measure(args, dtype: str, update: str) -> dict:
    """One setting: a fresh model, 2 steps -> moved fraction, s/step, peak memory, state bytes."""
    import torch

    from steadyrl.assembly.setup import build_optimizer
    from steadyrl.precision import use_autocast
    from steadyrl.trainer.optim import trained_value
    from steadyrl.trainer.update import ppo_update

    device = torch.device(args.device)
    plan = _plan(dtype, update)
    cfg = _config(args, dtype, update)
    model = build_model(TINY if args.tiny else QWEN_0_5B).to(device=device, dtype=getattr(torch, plan.stored))
    use_autocast(model, plan, device.type)
    optimizer = build_optimizer(model.parameters(), cfg.optim, args.lr, update)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    g = torch.Generator().manual_seed(args.seed)
    vocab = model.config.vocab_size
    prompts = torch.randint(2, vocab, (args.prompts, args.prompt_len), generator=g).to(device)
    before = [trained_value(p, optimizer).clone() for p in model.parameters()]
    times = []
    for _ in range(2):
        start = time.perf_counter()
        batch = _step_batch(model, prompts, args, g)
        ppo_update(model, optimizer, batch, cfg, kl_coef=0.0, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    after = [trained_value(p, optimizer) for p in model.parameters()]
    moved = sum(int((a != b).sum()) for a, b in zip(after, before)) / sum(a.numel() for a in after)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"setting": f"{dtype}" + (f" + {update}" if dtype in ("bfloat16", "float16") else ""),
            "stored": plan.stored, "computed": plan.computed, "moved": moved, "s_per_step": statistics.mean(times),
            "peak_gib": peak, "state_bytes": state_bytes(model, optimizer)}


def measure_trl(args) -> dict | None:
    """TRL's GRPOTrainer for 2 steps on the same prompts (random rewards), or None without trl."""
    try:
        import trl  # noqa: F401
    except ImportError:
        return None
    import tempfile

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from steadyrl.demo.tokenizer import build_char_tokenizer

    model = build_model(TINY if args.tiny else QWEN_0_5B)
    tokenizer = build_char_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789 ")
    rows = [{"prompt": "".join(chr(97 + (i * 7 + j) % 26) for j in range(args.prompt_len))}
            for i in range(args.prompts)]
    g = torch.Generator().manual_seed(args.seed)

    def reward(completions, **kw):
        return torch.rand(len(completions), generator=g).tolist()

    cuda = args.device == "cuda"
    before = [p.detach().float().clone() for p in model.parameters()]
    times: list[float] = []
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            times.append(-time.perf_counter())

        def on_step_end(self, a, state, control, **kw):
            times[-1] += time.perf_counter()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="gpu_check_trl_") as tmp:
        config = GRPOConfig(output_dir=tmp, use_cpu=not cuda, bf16=cuda, max_steps=2, seed=args.seed,
                            per_device_train_batch_size=args.prompts * args.group, num_generations=args.group,
                            max_completion_length=args.new_tokens, learning_rate=args.lr, beta=0.0,
                            lr_scheduler_type="constant", gradient_checkpointing=False, logging_steps=1,
                            save_strategy="no", report_to="none", disable_tqdm=True, temperature=1.0, top_k=0)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, callbacks=[Timer()])
        trainer.train()
    after = [p.detach().float() for p in trainer.model.parameters()]
    moved = sum(int((a.cpu() != b.cpu()).sum()) for a, b in zip(after, before)) / sum(a.numel() for a in after)
    return {"setting": "TRL GRPOTrainer (bf16=True)" if cuda else "TRL GRPOTrainer (float32)",
            "stored": "float32", "computed": "bfloat16" if cuda else "float32", "moved": moved,
            "s_per_step": statistics.mean(times) if times else float("nan"),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None, "state_bytes": None}


def table(rows: list[dict]) -> str:
    lines = ["| setting | stored | computed | weights moved after 2 steps | s / step | peak CUDA GiB | "
             "weights + grads + optimizer state |", "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "n/a"
        size = f"{r['state_bytes'] / 2**20:.1f} MiB" if r["state_bytes"] is not None else "n/a"
        lines.append(f"| {r['setting']} | {r['stored']} | {r['computed']} | {100 * r['moved']:.2f}% | "
                     f"{r['s_per_step']:.3f} | {peak} | {size} |")
    return "\n".join(lines)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a tiny Qwen2 (hidden 64, 2 layers): the CPU test")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-trl", action="store_true", help="leave TRL's column out even when trl is installed")
    p.add_argument("--sections", default="precision,logprobs,generate",
                   help="comma-separated: precision (the settings' step), logprobs, generate (issue 36)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions of each log-prob measurement")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda but no CUDA device here; use --device cpu", file=sys.stderr)
        return 2
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - {"precision", "logprobs", "generate"}
    if unknown:
        print(f"gpu_check: --sections {sorted(unknown)} unknown; valid: precision, logprobs, generate",
              file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    shape = "tiny Qwen2" if args.tiny else "Qwen2.5-0.5B-shaped Qwen2 (random weights)"
    if "precision" in sections:
        rows = [measure(args, dtype, update) for dtype, update in SETTINGS]
        trl_row = None if args.no_trl else measure_trl(args)
        if trl_row is not None:
            rows.append(trl_row)
        print(f"{shape} on {where}; {args.prompts} prompts x {args.group} samples x {args.new_tokens} new "
              f"tokens, lr {args.lr:g}, one update per step" + ("" if trl_row else "; TRL not installed: no TRL row"))
        print(table(rows))
    _speed_sections(args, sections, shape, where)
    return 0


def _speed_sections(args, sections: set, shape: str, where: str) -> None:
    """Issue 36's figures: log-prob time / memory per path, generation tokens/s per engine setting."""
    import torch

    from . import gpu_check_speed as speed

    dims = TINY if args.tiny else QWEN_0_5B
    device = torch.device(args.device)
    if "logprobs" in sections:
        rows = speed.logprob_rows(args, device, dims["hidden_size"], dims["vocab_size"])
        print(f"\nLog-probs + entropy, forward + backward, bf16 hidden {dims['hidden_size']}, V = "
              f"{dims['vocab_size']:,}, on {where} (mean of {args.reps}):")
        print(speed.logprob_table(rows))
    if "generate" in sections:
        model = build_model(dims).to(device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
        rows = speed.generation_rows(args, model, device)
        print(f"\nGeneration, {shape} on {where}: {args.prompts} prompts x {args.group} samples x "
              f"{args.new_tokens} new tokens:")
        print(speed.generation_table(rows))


if __name__ == "__main__":
    sys.exit(main())
