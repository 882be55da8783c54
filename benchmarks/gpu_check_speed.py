"""The speed sections of :mod:`benchmarks.gpu_check` (issue 36): log-probs and generation.

* Log-probs + entropy, forward and backward, bf16 hidden states ``[tokens, H]`` and a bf16 LM-head
  weight ``[V, H]`` (both needing gradients), at 8,192 / 32,768 / 131,072 tokens: each
  ``trainer.logprob_impl`` that reads hidden states (``fused``, ``chunked_grad``), the naive path
  (whole float32 log-softmax) and, when ``trl`` is importable, TRL's ``selective_log_softmax`` +
  entropy. Time: the mean of ``--reps`` synchronised repetitions after one warm-up; memory: the
  peak CUDA allocation over the inputs (``max_memory_allocated`` minus the allocation before).
  A method that runs out of memory reports ``OOM``; one that would exceed the time budget is skipped.
* Generation: tokens per second of ``model.generate`` (the HF engine) on the check's batch, per
  ``rollout.hf_cache`` setting (``dynamic``, the default, and ``static``, which transformers
  compiles on CUDA; the first timed call of ``static`` includes that compilation's warm-up left
  after a 2-token call).

On the CPU (``--tiny --device cpu``, the test) the sizes shrink and memory reads ``n/a``.
"""

from __future__ import annotations

import time

LOGPROB_TOKENS = (8192, 32768, 131072)
TINY_LOGPROB_TOKENS = (64, 256)
LOGPROB_IMPLS = ("fused", "chunked_grad", "naive", "trl")
GEN_CACHES = ("dynamic", "static")


def _logprob_fn(impl: str):
    """``fn(hidden, weight, labels) -> (logp, entropy)`` of ``impl``, or None where unavailable."""
    import torch

    if impl == "fused":
        from steadyrl.functional import logprobs_from_hidden as f

        return lambda h, w, y: f(h, w, y, return_entropy=True)
    if impl == "chunked_grad":
        from steadyrl.functional import logprobs_from_hidden_rows as f

        return lambda h, w, y: f(h, w, y, return_entropy=True)
    if impl == "naive":
        def naive(h, w, y):
            logp = torch.log_softmax((h @ w.T).float(), -1)
            return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)

        return naive
    try:
        from trl.trainer import utils
    except ImportError:
        return None

    def trl(h, w, y):
        logits = h @ w.T
        if hasattr(utils, "selective_log_softmax_and_entropy"):
            return utils.selective_log_softmax_and_entropy(logits, y)
        full = logits.float().log_softmax(-1)
        return utils.selective_log_softmax(logits, y), -(full.exp() * full).sum(-1)

    return trl


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def time_logprobs(fn, tokens: int, hdim: int, vocab: int, device, dtype, reps: int) -> dict:
    """Mean seconds and peak extra memory (GiB, CUDA only) of forward + backward of ``fn``."""
    import torch

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, hdim, generator=g).to(device, dtype).requires_grad_(True)
    weight = (torch.randn(vocab, hdim, generator=g) * 0.02).to(device, dtype).requires_grad_(True)
    labels = torch.randint(0, vocab, (tokens,), generator=g).to(device)
    g1, g2 = (torch.randn(tokens, generator=g).to(device) for _ in range(2))

    def step():
        logp, ent = fn(hidden, weight, labels)
        (logp.float() * g1 + ent.float() * g2).sum().backward()
        hidden.grad = weight.grad = None

    cuda = device.type == "cuda"
    try:
        step()  # warm-up: first-call paths, allocator
        _sync(device)
        if cuda:
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        _sync(device)
        seconds = (time.perf_counter() - start) / reps
    except torch.OutOfMemoryError:
        return {"tokens": tokens, "oom": True}
    finally:
        del hidden, weight
        if cuda:
            torch.cuda.empty_cache()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else None
    return {"tokens": tokens, "s": seconds, "extra_gib": peak}


def logprob_rows(args, device, hdim: int, vocab: int) -> list[dict]:
    """One row per (tokens, impl); the naive path and TRL stop after their first OOM."""
    import torch

    dtype = torch.bfloat16
    sizes = TINY_LOGPROB_TOKENS if args.tiny else LOGPROB_TOKENS
    rows, failed = [], set()
    for tokens in sizes:
        for impl in LOGPROB_IMPLS:
            fn = _logprob_fn(impl)
            if fn is None:
                continue
            if impl in failed:
                rows.append({"impl": impl, "tokens": tokens, "oom": True})
                continue
            r = {"impl": impl, **time_logprobs(fn, tokens, hdim, vocab, device, dtype, args.reps)}
            if r.get("oom"):
                failed.add(impl)
            rows.append(r)
    return rows


def _ratio(r: dict, ref: dict | None, key: str, fmt: str) -> str:
    if ref is None or ref.get("oom") or r.get(key) is None or not ref.get(key):
        return "-"
    return format(r[key] / ref[key], fmt) + "x"


def logprob_table(rows: list[dict]) -> str:
    """Markdown: time and extra memory, each against naive and TRL at the same token count."""
    lines = ["| tokens | log-prob path | ms (fwd + bwd) | extra GiB | time vs naive | time vs TRL "
             "| memory vs TRL |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("oom"):
            lines.append(f"| {r['tokens']:,} | {r['impl']} | OOM | OOM | - | - | - |")
            continue
        naive, trl = (next((x for x in rows if x["tokens"] == r["tokens"] and x["impl"] == name), None)
                      for name in ("naive", "trl"))
        mem = "n/a" if r["extra_gib"] is None else f"{r['extra_gib']:.2f}"
        lines.append(f"| {r['tokens']:,} | {r['impl']} | {1000 * r['s']:.1f} | {mem} | {_ratio(r, naive, 's', '.2f')} "
                     f"| {_ratio(r, trl, 's', '.2f')} | {_ratio(r, trl, 'extra_gib', '.3f')} |")
    return "\n".join(lines)


def generation_rows(args, model, device) -> list[dict]:
    """Tokens per second of ``model.generate`` on the check's batch, per KV-cache setting."""
    import torch

    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(2, model.config.vocab_size, (args.prompts * args.group, args.prompt_len), generator=g)
    ids = ids.to(device)
    rows = []
    for cache in GEN_CACHES:
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "do_sample": True, "top_k": 0,
                  "top_p": 1.0, "max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens,
                  "pad_token_id": 0}
        if cache != "dynamic":
            kwargs["cache_implementation"] = cache
        try:
            with torch.no_grad():
                model.generate(**{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
                _sync(device)
                start = time.perf_counter()
                out = model.generate(**kwargs)
                _sync(device)
        except (ValueError, RuntimeError, TypeError) as e:  # a cache this transformers / model lacks
            rows.append({"cache": cache, "error": str(e).splitlines()[0][:120]})
            continue
        seconds = time.perf_counter() - start
        new = (out.shape[1] - ids.shape[1]) * out.shape[0]
        rows.append({"cache": cache, "s": seconds, "tokens": new, "tok_s": new / seconds})
    return rows


def generation_table(rows: list[dict]) -> str:
    lines = ["| HF engine setting | new tokens | seconds | tokens / s | vs dynamic |", "|---|---:|---:|---:|---:|"]
    base = next((r for r in rows if r["cache"] == "dynamic" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            lines.append(f"| generate, cache {r['cache']} | - | - | failed: {r['error']} | - |")
            continue
        ratio = f"{r['tok_s'] / base['tok_s']:.2f}x" if base else "-"
        lines.append(f"| generate, cache {r['cache']} | {r['tokens']:,} | {r['s']:.2f} | {r['tok_s']:,.0f} "
                     f"| {ratio} |")
    return "\n".join(lines)
