"""Step-time overhead of image inputs against text of equal token count (a tiny Qwen2-VL, CPU).

    python -m benchmarks.bench_vision                 # image sizes 28 / 112 / 224, 1 and 4 images
    python -m benchmarks.bench_vision --quick         # smoke run: one size, one repetition
    python -m benchmarks.bench_vision --write-md BENCHMARKS.md

For each (image side, images per prompt k) a batch of prompts is built twice from one random
Qwen2-VL (:func:`steadyrl.demo.vision_model.build_tiny_qwen2_vl`, hidden 128, 4 layers, vision
depth 2): once with k images (each expanded by the processor into ``(side / 28) ** 2`` image
tokens between its vision start and end tokens) and once as text whose tokens are as many as the
image prompt's (the same characters repeated, so the two batches have one shape). Two stages of an
RL step are timed on each:

* ``generate``: ``model.generate`` of ``n`` samples per prompt, ``new`` tokens each (no early stop);
* ``logprobs f+b``: one forward over prompt + response, the log-probs of the response tokens,
  their sum backpropagated (the trainer's policy pass; the vision tower frozen, as by default);
  every sample of a group carries its prompt's images, so the tower runs once per sample (the
  ``vision tower`` column: that forward's image encoding alone, no gradient).

Times are the CPU time of the process's one thread (``time.thread_time``, ``torch.set_num_threads(1)``),
the minimum over the repetitions (the least disturbed one on a shared machine); the overhead is
image / text. The image side of each pass includes the vision tower and the multimodal RoPE index
that a text prompt does not need; the processor's image preprocessing (resize, patching) happens once
per prompt when prompts are built and is timed apart (``preprocess``, per image).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

import torch

from .common import machine, write_md

SIDES = (28, 112, 224)
IMAGES = (1, 4)
PROMPTS, SAMPLES, NEW_TOKENS = 4, 4, 16
HIDDEN, LAYERS = 128, 4


def _build(side: int):
    from steadyrl.demo.vision_model import build_tiny_qwen2_vl, build_vision_tokenizer

    tokenizer = build_vision_tokenizer("abcdefghijnrstu ?\n", "qwen2_vl", model_max_length=8192)
    model, processor = build_tiny_qwen2_vl(tokenizer, hidden_size=HIDDEN, n_layers=LAYERS, n_heads=4,
                                           image_size=side, seed=0)
    return model, processor


def _batches(processor, model, k: int, side: int) -> tuple[dict, dict, float]:
    """``(image_batch, text_batch, preprocess seconds per image)`` of :data:`PROMPTS` prompts."""
    from PIL import Image

    rng = random.Random(0)
    images = [[Image.new("RGB", (side, side), tuple(rng.randrange(256) for _ in range(3))) for _ in range(k)]
              for _ in range(PROMPTS)]
    messages = [{"role": "user", "content": [*({"type": "image"} for _ in range(k)), {"type": "text", "text": "abc?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    start = time.thread_time()
    image_batch = processor(text=[text] * PROMPTS, images=images, return_tensors="pt")
    preprocess = (time.thread_time() - start) / (PROMPTS * k)
    width = image_batch["input_ids"].shape[1]
    plain = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": "X"}], add_generation_prompt=True, tokenize=False)
    filler = len(processor.tokenizer(plain.replace("X", ""), add_special_tokens=False)["input_ids"])
    body = ("abcdefghij" * (width // 10 + 1))[: width - filler]
    text_ids = processor.tokenizer([plain.replace("X", body)] * PROMPTS, return_tensors="pt", add_special_tokens=False)
    assert text_ids["input_ids"].shape[1] == width, (text_ids["input_ids"].shape, width)
    image_batch["mm_token_type_ids"] = (image_batch["input_ids"] == model.config.image_token_id).long()
    return dict(image_batch), {"input_ids": text_ids["input_ids"], "attention_mask": text_ids["attention_mask"]}, preprocess


def _repeat(batch: dict, n: int) -> dict:
    """Each prompt's row (and its image inputs) ``n`` times, as a group of samples is laid out."""
    out = {k: v.repeat_interleave(n, 0) for k, v in batch.items() if k not in ("pixel_values", "image_grid_thw")}
    if "image_grid_thw" in batch:
        per = batch["pixel_values"].shape[0] // batch["input_ids"].shape[0]
        rows = batch["pixel_values"].view(batch["input_ids"].shape[0], per, -1)
        out["pixel_values"] = rows.repeat_interleave(n, 0).reshape(-1, rows.shape[-1])
        grids = batch["image_grid_thw"].view(batch["input_ids"].shape[0], -1, 3)
        out["image_grid_thw"] = grids.repeat_interleave(n, 0).reshape(-1, 3)
    return out


def _time(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def _image_special_ids(model) -> list[int]:
    """The ids a response must not hold (a random model samples anything): image and video tokens."""
    c = model.config
    return [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]


def _stages(model, batch: dict, pad_id: int) -> dict:
    with torch.no_grad():
        gen = lambda: model.generate(**batch, do_sample=True, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,  # noqa: E731
                                     num_return_sequences=SAMPLES, pad_token_id=pad_id,
                                     suppress_tokens=_image_special_ids(model))
        t_gen = _time(gen)
        out = gen()
    full = _repeat(batch, SAMPLES)
    width = batch["input_ids"].shape[1]
    full["input_ids"] = out
    full["attention_mask"] = torch.cat([full["attention_mask"], torch.ones_like(out[:, width:])], 1)
    if "mm_token_type_ids" in full:
        full["mm_token_type_ids"] = (out == model.config.image_token_id).long()

    def forward_backward():
        logits = model(**full).logits[:, width - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, out[:, width:, None])
        model.zero_grad(set_to_none=True)
        logp.sum().backward()

    out_times = {"generate": t_gen, "logprobs": _time(forward_backward)}
    if "pixel_values" in full:  # the part of the forward that is the vision tower (frozen: no backward)
        with torch.no_grad():
            out_times["tower"] = _time(lambda: model.model.get_image_features(full["pixel_values"],
                                                                              full["image_grid_thw"]))
    return out_times


def measure(side: int, k: int, reps: int) -> dict:
    model, processor = _build(side)
    for p in model.model.visual.parameters():  # model.freeze_vision: true, the default
        p.requires_grad_(False)
    image, text, preprocess = _batches(processor, model, k, side)
    pad = processor.tokenizer.pad_token_id
    runs = {"image": [], "text": []}
    for _ in range(reps):  # interleaved, so a change of load falls on both alike
        runs["image"].append(_stages(model, image, pad))
        runs["text"].append(_stages(model, text, pad))
    best = {side_: {s: min(r[s] for r in rs) for s in rs[0]} for side_, rs in runs.items()}
    image_tokens = int((image["input_ids"] == model.config.image_token_id).sum()) // PROMPTS
    return {"side": side, "k": k, "prompt_tokens": image["input_ids"].shape[1], "image_tokens": image_tokens,
            "preprocess": preprocess, **best}


def _table(rows: list[dict]) -> list[str]:
    out = ["| image side | images | prompt tokens (image tokens) | preprocess, ms/image | generate text / image, s | "
           "overhead | log-probs f+b text / image, s | overhead | of which the vision tower, s |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        g, f = (r["text"]["generate"], r["image"]["generate"]), (r["text"]["logprobs"], r["image"]["logprobs"])
        out.append(f"| {r['side']} | {r['k']} | {r['prompt_tokens']} ({r['image_tokens']}) | {1000 * r['preprocess']:.1f} "
                   f"| {g[0]:.3f} / {g[1]:.3f} | {g[1] / g[0]:.2f}x | {f[0]:.3f} / {f[1]:.3f} | {f[1] / f[0]:.2f}x "
                   f"| {r['image']['tower']:.3f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--write-md", metavar="PATH")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    sides, images, reps = ((28,), (1,), 1) if args.quick else (SIDES, IMAGES, args.reps)
    load = os.getloadavg()[0]
    rows = []
    for side in sides:
        for k in images:
            rows.append(measure(side, k, reps))
            print(rows[-1], flush=True)
    command = "python -m benchmarks.bench_vision" + (" --quick" if args.quick else f" --reps {reps}")
    lines = [f"`{command}` ({PROMPTS} prompts x {SAMPLES} samples, {NEW_TOKENS} new tokens; Qwen2-VL hidden "
             f"{HIDDEN}, {LAYERS} layers, vision depth 2, vision tower frozen); {machine(threads=1)}; "
             f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after. CPU time of the one thread, "
             f"min of {reps}.", "", *_table(rows)]
    print("\n".join(lines))
    if args.write_md:
        write_md(Path(args.write_md), "vision", "Vision: image inputs against text of equal token count",
                 "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
