"""The low-precision update options side by side (docs/precision.md, model.bf16_update): the
optimizer step alone, on weights ~N(0, 0.02) with gradients ~N(0, 1), lr 1e-6.

    python -m benchmarks.bench_precision_optim            # 4M parameters, 20 steps each
    python -m benchmarks.bench_precision_optim --probe    # the cost of actor/update_ratio per step

Reported per option: the fraction of weights whose trained value moved after 2 steps, the bytes
of weights + gradients + optimizer state per parameter (counted from the tensors), and the CPU
time of one optimizer step (median of the steps after the first; ``time.process_time``, steadier
than the wall clock on a shared machine). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

OPTIONS = [("float32 AdamW (the default's master weights)", "float32", "adamw"),
           ("bfloat16 + plain AdamW", "bfloat16", "adamw"),
           ("bfloat16 + kahan", "bfloat16", "kahan"),
           ("bfloat16 + stochastic_rounding", "bfloat16", "stochastic_rounding"),
           ("bfloat16 + master", "bfloat16", "master")]


def run(numel: int, steps: int, dtype_name: str, kind: str, seed: int = 0) -> dict:
    import torch

    from steadyrl.trainer.optim import LowPrecisionAdamW, trained_value

    g = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter((torch.randn(numel, generator=g) * 0.02).to(getattr(torch, dtype_name)))
    opt = (torch.optim.AdamW([w], lr=1e-6, weight_decay=0.0) if kind == "adamw"
           else LowPrecisionAdamW([w], lr=1e-6, variant=kind))
    before = trained_value(w, opt).clone()
    times, moved = [], None
    for step in range(steps):
        w.grad = torch.randn(numel, generator=g).to(w.dtype)
        start = time.process_time()
        opt.step()
        times.append(time.process_time() - start)
        if step == 1:
            moved = float((trained_value(w, opt) != before).float().mean())
    state = sum(v.numel() * v.element_size() for v in opt.state[w].values() if v.dim() > 0)
    per_param = (w.numel() * w.element_size() * 2 + state) / numel  # weight + gradient + state
    return {"moved": moved, "bytes": per_param, "ms": 1000 * statistics.median(times[1:])}


def probe_cost(repeats: int = 20) -> dict:
    """CPU time of ``actor/update_ratio`` + ``params_changed_frac`` (UpdateProbe: one sample before,
    one after) on the tensors of a Qwen2.5-0.5B-shaped model (24 layers, hidden 896; vocabulary
    cut to 4096 to fit a small machine: the probe reads 1024 entries per tensor, whatever its size)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from steadyrl.trainer.optim import UpdateProbe

    config = Qwen2Config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=4096)
    model = Qwen2ForCausalLM(config)
    params = list(model.parameters())
    times = []
    for _ in range(repeats):
        start = time.process_time()
        UpdateProbe(params, None).metrics()
        times.append(time.process_time() - start)
    return {"tensors": len(params), "ms": 1000 * statistics.median(times)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=4_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--probe", action="store_true", help="the update-ratio probe's cost instead")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.probe:
        r = probe_cost()
        print(f"UpdateProbe on {r['tensors']} tensors (Qwen2.5-0.5B-shaped): {r['ms']:.1f} ms CPU time per step")
        return 0
    print(f"{args.numel} parameters, lr 1e-6, {args.steps} steps, {args.threads} thread(s)")
    print("| option | weights moved after 2 steps | bytes / param (weight + grad + state) | ms / optimizer step |")
    print("|---|---:|---:|---:|")
    for name, dtype, kind in OPTIONS:
        r = run(args.numel, args.steps, dtype, kind)
        print(f"| {name} | {100 * r['moved']:.2f}% | {r['bytes']:.0f} | {r['ms']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
