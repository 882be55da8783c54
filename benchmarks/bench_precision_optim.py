"""The low-precision update options side by side (docs/precision.md, model.bf16_update): the
optimizer step alone, on weights ~N(0, 0.02) with gradients ~N(0, 1), lr 1e-6.

    python -m benchmarks.bench_precision_optim            # 4M parameters, 20 steps each

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=4_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"{args.numel} parameters, lr 1e-6, {args.steps} steps, {args.threads} thread(s)")
    print("| option | weights moved after 2 steps | bytes / param (weight + grad + state) | ms / optimizer step |")
    print("|---|---:|---:|---:|")
    for name, dtype, kind in OPTIONS:
        r = run(args.numel, args.steps, dtype, kind)
        print(f"| {name} | {100 * r['moved']:.2f}% | {r['bytes']:.0f} | {r['ms']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
