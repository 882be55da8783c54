"""The default generation engine: transformers' ``generate`` with sampling and the KV cache.

The log-probs recomputed for the loss assume that a response was sampled from exactly
``softmax(logits / temperature)``, truncated only by the ``top_p`` / ``top_k`` the user set. A
model's ``generation_config.json`` must not change that: transformers fills every setting a call
leaves unset from the model's generation config (Qwen2.5-Instruct ships top-p 0.8, top-k 20 and a
repetition penalty of 1.05), and then from its own global defaults (top-k 50). So for the length of
each call every ``generation_config`` in the model is swapped for a blank one that keeps only the
token ids (EOS, BOS, padding), and ``top_k=0`` / ``top_p=1.0`` are passed explicitly when the user
turned them off. Greedy evaluation is plain argmax decoding for the same reason.

``rollout.dtype`` (``dtype=`` here) makes the gap between the engine and the trainer real on any
machine: the engine generates with its own copy of the policy in that precision (e.g. bfloat16
beside a float32 trainer), whose weights :meth:`HFEngine.update_weights` refreshes from the
trainer's after every update, and it returns the sampled tokens' log-probs under that copy,
``log softmax(logits / temperature)[token]`` of one teacher-forced forward pass in the precision
it sampled in (``Generation.rollout_logprobs``, 0 on padding). Cost: one more copy of the
weights, one weight copy per update and that forward pass per batch. Greedy decoding reports none.

Images (a vision-language model): ``generate(..., image_inputs=[...])`` takes each prompt's image
inputs (:mod:`steadyrl.vlm_inputs`; the prompt ids already hold the processor-expanded image
tokens). The engine repeats each prompt and its image inputs ``n`` times itself and generates one
sequence per row with the collated image inputs and the token-aligned inputs recomputed from the
ids (Qwen-VL computes its multimodal RoPE positions itself). Prefix sharing
(:func:`~steadyrl.rollout.prefix.prefill_once`) is not used for a chunk with images: the shared
prompt cache would have to be computed with the image features merged into the prompt's
embeddings and the model's multimodal positions (and ``rope_deltas``) carried over to the
continuation, which ``generate`` does not take from a ready cache; so those prompts are run ``n``
times (text-only chunks still share, except on a model that computes its own positions: Qwen-VL
keeps the last forward's ``rope_deltas`` and would continue a text prompt's shared cache with the
positions of an earlier image batch). A VLM never samples its image (and video) placeholder tokens
(``suppress_tokens``): a sampled placeholder is an image token without an image, which the
forward passes after it refuse; sampling then differs from ``softmax(logits / temperature)`` by
the placeholders' probability (nothing, for a trained VLM; the recomputed log-probs leave it in).
``images=`` (the PIL images) is for engines that process
images themselves (vLLM) and is ignored here.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from ..functional import logprobs_from_logits
from ..vlm_inputs import (collate_image_inputs, computes_own_positions, has_images, model_image_kwargs, placeholder_token_ids,
                          repeat_image_inputs)
from .base import Generation, concat_generations, eos_token_ids, response_mask_from_ids
from .prefix import prefill_once


class HFEngine:
    """Samples ``n`` responses per prompt with ``model.generate``: the training model itself, or
    with ``dtype`` a copy of it in that precision that also reports its log-probs (module doc)."""

    def __init__(self, model, tokenizer, *, batch_size: int | None = None, share_prefix: bool = True,
                 dtype: torch.dtype | None = None, cache: str = "dynamic"):
        self.tokenizer = tokenizer
        self.cache = cache  # rollout.hf_cache: "dynamic" or "static" (transformers' cache_implementation)
        self.batch_size = batch_size
        self.share_prefix = share_prefix
        self.dtype = dtype
        self.model = model if dtype is None else engine_copy(model, dtype)
        self.weight_sync: dict[str, float] = {}  # figures of the last refresh of the copy (update_weights)
        self.eos_ids = eos_token_ids(tokenizer, model)

    def update_weights(self, model) -> None:
        """Without ``dtype`` the engine generates with the training model itself: nothing to sync.
        With it, the training weights are copied (cast) into the engine's copy, and
        :attr:`weight_sync` says how exactly (:func:`weight_sync_figures`)."""
        if self.dtype is None:
            self.model = model
        elif self.model is not model:
            before = _sample(self.model)
            with torch.no_grad():
                self.model.load_state_dict(model.state_dict())
            self.weight_sync = weight_sync_figures(before, self.model, model)

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 do_sample: bool = True, logprobs: bool = False, image_inputs: list[dict | None] | None = None,
                 images: list[tuple] | None = None) -> Generation:
        """``logprobs``: also the sampled tokens' log-probs under the distribution they were sampled
        from (``rollout_logprobs``; the gateway returns them to its clients). ``image_inputs``: each
        prompt's image inputs (None: a text prompt); ``images`` is vLLM's and ignored (module doc)."""
        if image_inputs is not None and len(image_inputs) != len(prompt_ids):
            raise ValueError(f"image_inputs has {len(image_inputs)} entries for {len(prompt_ids)} prompts: "
                             "give one per prompt (None for a prompt without images)")
        step = self.batch_size or len(prompt_ids)
        parts = [self._generate(prompt_ids[i : i + step], n, max_new_tokens, temperature, top_p, top_k, do_sample,
                                logprobs, None if image_inputs is None else image_inputs[i : i + step])
                 for i in range(0, len(prompt_ids), step)]
        return concat_generations(parts, self.tokenizer.pad_token_id)

    def _run(self, model, input_ids, attention_mask, n: int, config, rows_images) -> torch.Tensor:
        """``model.generate`` in eval mode with the neutral defaults: from a shared prefix cache
        where that applies, with the rows' image inputs where they have any (module doc)."""
        was_training = model.training
        model.eval()
        try:
            with neutral_generation_defaults(model):
                # a repeated prefix needs a dynamic cache, and no images (module doc)
                share = (self.share_prefix and self.cache == "dynamic" and rows_images is None
                         and not computes_own_positions(getattr(model, "config", None)))
                shared = prefill_once(model, input_ids, attention_mask, n) if share else None
                if shared is not None:  # each prompt prefilled once, its cache repeated for the group
                    config.num_return_sequences = 1
                    return model.generate(**shared, generation_config=config)
                extra = {} if rows_images is None else _image_kwargs(model, input_ids,
                                                                     collate_image_inputs(rows_images))
                return model.generate(input_ids=input_ids, attention_mask=attention_mask, **extra,
                                      generation_config=config)
        finally:
            model.train(was_training)

    def _generate(self, prompt_ids, n, max_new_tokens, temperature, top_p, top_k, do_sample, logprobs=False,
                  image_inputs=None):
        from transformers import GenerationConfig

        model = self.model
        device = next(model.parameters()).device
        batch = self.tokenizer.pad({"input_ids": prompt_ids}, padding=True, return_tensors="pt")
        input_ids = batch["input_ids"].to(device)
        attention_mask = batch["attention_mask"].to(device)
        rows_images = repeat_image_inputs(image_inputs, n) if has_images(image_inputs) else None
        if rows_images is not None:  # each prompt n times with its images: no num_return_sequences, no sharing
            input_ids, attention_mask = input_ids.repeat_interleave(n, 0), attention_mask.repeat_interleave(n, 0)
        config = GenerationConfig(
            do_sample=do_sample,
            temperature=temperature if do_sample else None,
            top_p=top_p if do_sample else None,
            top_k=top_k if do_sample else None,  # 0 turns top-k off; None would mean transformers' 50
            max_new_tokens=max_new_tokens,
            num_return_sequences=n if rows_images is None else 1,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
            output_scores=logprobs,
            return_dict_in_generate=logprobs,
        )
        if self.cache != "dynamic":
            config.cache_implementation = self.cache
        placeholders = placeholder_token_ids(getattr(model, "config", None))  # a VLM's (module doc)
        if placeholders:
            config.suppress_tokens = placeholders
        out = self._run(model, input_ids, attention_mask, n, config, rows_images)
        repeat = 1 if rows_images is not None else n  # rows already repeated with their images
        scores = out.scores if logprobs else None
        out = out.sequences if logprobs else out
        prompt_len = input_ids.shape[1]
        response_ids = out[:, prompt_len:].cpu()
        response_mask, truncated = response_mask_from_ids(response_ids, self.eos_ids, max_new_tokens)
        response_ids = torch.where(response_mask.bool(), response_ids, self.tokenizer.pad_token_id)
        completions = self.tokenizer.batch_decode(
            [ids[m.bool()] for ids, m in zip(response_ids, response_mask)], skip_special_tokens=True
        )
        rollout_logprobs = None
        if scores is not None:  # asked for (the gateway): the processed distributions they were drawn from
            rollout_logprobs = _sampled_logprobs(scores, response_ids, response_mask)
        elif self.dtype is not None and do_sample:
            rows = (input_ids.repeat_interleave(repeat, 0), attention_mask.repeat_interleave(repeat, 0))
            rollout_logprobs = sampled_logprobs(model, *rows, response_ids.to(device), response_mask.to(device),
                                                temperature, image_inputs=rows_images).cpu()
        return Generation(
            rollout_logprobs=rollout_logprobs,
            image_inputs=rows_images,
            prompt_ids=input_ids.repeat_interleave(repeat, 0).cpu(),
            prompt_mask=attention_mask.repeat_interleave(repeat, 0).cpu(),
            response_ids=response_ids,
            response_mask=response_mask,
            truncated=truncated,
            completions=completions,
        )


SYNC_SAMPLE = 256
"""Entries of each weight tensor (every ``numel // SYNC_SAMPLE``-th) the weight-sync figures read."""


def _sample(model) -> list[torch.Tensor]:
    out = []
    for p in model.state_dict().values():
        flat = p.detach().reshape(-1)
        out.append(flat[:: max(1, flat.numel() // SYNC_SAMPLE)][:SYNC_SAMPLE].clone())
    return out


def weight_sync_figures(before: list[torch.Tensor], copy_model, trainer_model) -> dict[str, float]:
    """After a refresh of the engine's copy (docs/metrics.md): ``rollout/weight_sync_max_diff``,
    the largest |copy - trainer weight cast to the copy's dtype| over a fixed sample (0: the copy is
    exactly the trainer's weights rounded; above 0: stale), and ``rollout/weight_sync_changed_frac``,
    the sampled entries of the copy this refresh changed (a bfloat16 copy of float32 weights trained
    at a small lr changes few entries per step: its sampling policy moves in rounding steps)."""
    after = _sample(copy_model)
    trainer = _sample(trainer_model)
    diff, changed, total = 0.0, 0, 0
    for b, a, t in zip(before, after, trainer):
        if not a.is_floating_point():
            continue
        diff = max(diff, float((a.float() - t.to(a.dtype).float()).abs().max()) if a.numel() else 0.0)
        changed += int((a != b).sum())
        total += a.numel()
    return {"rollout/weight_sync_max_diff": diff, "rollout/weight_sync_changed_frac": changed / max(total, 1)}


def engine_sync_metrics(engine) -> dict[str, float]:
    """The last refresh's weight-sync figures of an HF engine with its own copy, else none."""
    return dict(engine.weight_sync) if isinstance(engine, HFEngine) else {}


def engine_copy(model, dtype: torch.dtype):
    """The engine's own copy of ``model`` in ``dtype`` (the model itself when it already is)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"rollout.dtype needs the policy as a torch module, got {type(model).__name__} "
                        "(a sharded FSDP policy cannot be copied: leave rollout.dtype null)")
    if next(model.parameters()).dtype == dtype:
        return model
    clone = copy.deepcopy(model).to(dtype)
    clone.requires_grad_(False)
    clone.eval()
    return clone


LOGITS_BUDGET = 2**27
"""Most logits (rows x response tokens x vocabulary) one forward pass of :func:`sampled_logprobs`
holds: 256 MiB in bf16; a larger batch is cut into row chunks."""


@torch.no_grad()
def sampled_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature: float, *,
                     image_inputs: list[dict | None] | None = None) -> torch.Tensor:
    """``[B, R]`` float32: each response token's ``log softmax(logits / temperature)`` under
    ``model`` (in its own precision), teacher-forced, in row chunks of at most ``LOGITS_BUDGET``
    logits; 0 on padding. ``image_inputs``: each row's (a VLM's; None = text rows)."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    r = response_ids.shape[1]
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else 1
    rows = max(1, LOGITS_BUDGET // ((r + 1) * vocab))
    was_training = model.training
    model.eval()
    parts = []
    try:
        for i in range(0, input_ids.shape[0], rows):
            part = slice(i, i + rows)
            images = collate_image_inputs(image_inputs[part]) if image_inputs is not None else None
            extra = _image_kwargs(model, input_ids[part], images, position_ids[part])
            logits = model(input_ids=input_ids[part], attention_mask=attention_mask[part], use_cache=False,
                           logits_to_keep=r + 1, **extra).logits[:, :-1]
            parts.append(logprobs_from_logits(logits, response_ids[part], temperature))
            del logits
    finally:
        model.train(was_training)
    logp = torch.cat(parts)
    return torch.where(response_mask.bool(), logp, torch.zeros((), dtype=logp.dtype, device=logp.device))


def _image_kwargs(model, input_ids, images: dict | None, position_ids=None) -> dict:
    """:func:`~steadyrl.vlm_inputs.model_image_kwargs` for ``model`` (its config and dtype)."""
    if images is None:
        return {"position_ids": position_ids} if position_ids is not None else {}
    dtype = next(model.parameters()).dtype
    kwargs = model_image_kwargs(model.config, input_ids, images, position_ids, dtype)
    return {k: v for k, v in kwargs.items() if v is not None}


def _sampled_logprobs(scores, response_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` float32: each sampled token's log-prob under the processed logits it was drawn
    from (``scores``, one ``[B, V]`` per position; 0 on padding)."""
    out = torch.zeros(response_ids.shape, dtype=torch.float32)
    for t, step_scores in enumerate(scores[: response_ids.shape[1]]):
        logp = torch.log_softmax(step_scores.float(), dim=-1).cpu()
        out[:, t] = logp.gather(1, response_ids[:, t : t + 1].clamp(min=0)).squeeze(1)
    return torch.where(response_mask.bool(), out, torch.zeros((), dtype=torch.float32))


# Settings of a generation config that name tokens rather than change the sampling distribution.
_TOKEN_ID_FIELDS = ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id")


@contextmanager
def neutral_generation_defaults(model):
    """For the ``with`` block, every ``generation_config`` in ``model`` (the model itself, or the
    one inside a PEFT or FSDP wrapper) is a blank ``GenerationConfig`` that keeps only the token
    ids of the original; the originals are put back afterwards, whatever happens."""
    from transformers import GenerationConfig

    root = model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)
    modules = root.modules() if isinstance(root, torch.nn.Module) else ()
    saved = [(m, vars(m)["generation_config"]) for m in modules  # its own, not a wrapper's view of it
             if isinstance(vars(m).get("generation_config"), GenerationConfig)]
    try:
        for m, original in saved:
            ids = {k: getattr(original, k, None) for k in _TOKEN_ID_FIELDS}
            m.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
        yield
    finally:
        for m, original in saved:
            m.generation_config = original
