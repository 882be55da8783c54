"""The vLLM generation engine: the optional ``vllm`` extra, CUDA only.

UNTESTED ON GPU in this project's CI (a CPU machine): only the conversion of vLLM's outputs
into a :class:`~steadyrl.rollout.base.Generation` (:func:`generation_from_outputs`) and the
engine's own ``generate`` / sleep logic driving multi-turn episodes are tested, over stand-in
objects (tests/rollout/test_episodes.py). See docs/scaling.md.

* Colocated: each training process builds its own ``vllm.LLM`` on its own GPU (tensor
  parallel 1), with ``gpu_memory_utilization`` from ``rollout.vllm``. Under ``torchrun`` it uses
  vLLM's ``external_launcher`` executor (vLLM runs inside the training process, on the rank's
  GPU, as TRL's colocate mode does). The engine runs in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so weights are handed over as tensors, not pickled.
* Sampling: ``SamplingParams(n=group_size, temperature, top_p, top_k, max_tokens, logprobs=0)``;
  ``logprobs=0`` returns the log-prob of each sampled token, which fills
  ``Generation.rollout_logprobs``. ``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2)
  makes them log-probs of the distribution actually sampled from (after temperature), which is
  what truncated importance sampling (``rollout.tis_cap``) compares with the trainer's.
* Weights: :meth:`VLLMEngine.update_weights` marks vLLM's copy stale after each update; the
  next :meth:`generate` pushes the training weights into vLLM's model (``load_weights`` through
  ``LLM.collective_rpc``, the stable worker API of recent vLLM) and resets its prefix cache.
  Under FSDP each parameter's full tensor is gathered first (a collective: all ranks generate
  at the same time in the training loop).
* Sleep mode (``rollout.vllm.sleep_mode``): after each ``generate`` vLLM frees its KV cache and
  offloads its weights to CPU memory (level 1), giving the GPU back to the trainer. The turns of
  multi-turn episodes run inside :meth:`VLLMEngine.awake`: vLLM sleeps after the last turn, not
  between turns (each turn's prompt is the previous turns' token ids plus the observation's:
  ``prompt_token_ids``, never text).

* Images (a vision-language model): vLLM processes images itself, from the PIL images, not from
  the processor's ``pixel_values``; so ``generate`` takes each prompt's PIL images as ``images=``
  (beside ``image_inputs=``, the processor's tensors, which the trainer's forward passes read) and
  sends ``{"prompt_token_ids": ids, "multi_modal_data": {"image": [...]}}`` per prompt
  (:func:`vllm_prompts`); the ids already hold the expanded image tokens, which vLLM's multimodal
  processor recognises as applied. Unlike the HF engine it does not forbid sampling the image
  placeholder tokens. ``Generation.image_inputs`` is filled from ``image_inputs`` (``n`` rows each).

Resuming a vLLM run is not bit-exact (GPU kernels are not deterministic).
"""

from __future__ import annotations

import contextlib
import os

import torch

from .. import distributed as dist
from ..errors import ConfigError
from ..precision import computed_dtype_of
from ..vlm_inputs import repeat_image_inputs
from .base import Generation, eos_token_ids, response_mask_from_ids

__all__ = ["VLLMEngine", "generation_from_outputs", "vllm_prompts"]


def _import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: tensors, not pickles
    try:
        import vllm
    except ImportError:
        raise ConfigError("rollout.engine = 'vllm' needs the vllm extra (pip install 'steadyrl[vllm]') and a "
                          "CUDA GPU; use rollout.engine=hf") from None
    return vllm


def _hf_model(model):
    """The transformers model behind what the trainer generates with (a plain model, or the
    FSDP generation view)."""
    from ..models import unwrap

    return unwrap(getattr(model, "model", model) if isinstance(model, dist.FSDPGenerator) else model)


def _named_weights(model) -> list[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` of every parameter, in transformers' names (what vLLM's
    ``load_weights`` reads); FSDP shards are gathered (a collective)."""
    out = []
    for name, p in _hf_model(model).named_parameters():
        t = p.detach()
        out.append((name, t.full_tensor() if hasattr(t, "full_tensor") else t))
    return out


def _load_weights_on_worker(worker, weights):
    """Runs on vLLM's worker (through ``collective_rpc``): load ``weights`` into its model."""
    runner = getattr(worker, "model_runner", worker)
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    model.load_weights(weights=weights)


def _logprob_value(entry) -> float:
    return float(entry.logprob if hasattr(entry, "logprob") else entry)


def generation_from_outputs(outputs, prompt_ids: list[list[int]], n: int, *, pad_id: int, eos_ids: list[int],
                            max_new_tokens: int, decode) -> Generation:
    """A :class:`Generation` from vLLM's ``RequestOutput`` s (one per prompt, ``n`` completions
    each, with ``token_ids``, ``logprobs`` (one dict per token, or None) and ``finish_reason``).

    A response is valid up to and including its first EOS; one that stopped on the length
    limit is truncated. ``rollout_logprobs`` holds each sampled token's log-prob (0 on padding),
    or is None when vLLM returned none.
    """
    rows, logprobs, finished_by_length = [], [], []
    for out in outputs:
        completions = sorted(out.outputs, key=lambda c: getattr(c, "index", 0))
        if len(completions) != n:
            raise RuntimeError(f"vLLM returned {len(completions)} completions for a prompt, expected {n}")
        for c in completions:
            ids = list(c.token_ids)
            rows.append(ids)
            finished_by_length.append(getattr(c, "finish_reason", None) == "length")
            if c.logprobs is None:
                logprobs.append(None)
            else:
                logprobs.append([_logprob_value(step[tok]) for step, tok in zip(c.logprobs, ids)])
    width = max([len(r) for r in rows] + [1])
    response_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    for i, r in enumerate(rows):
        response_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    in_length = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    eos_mask, _ = response_mask_from_ids(response_ids, eos_ids, max_new_tokens)
    response_mask = (eos_mask.bool() & in_length).long()
    response_ids = torch.where(response_mask.bool(), response_ids, pad_id)
    has_eos = torch.zeros(len(rows), dtype=torch.bool)
    for eos in eos_ids:
        has_eos |= ((response_ids == eos) & response_mask.bool()).any(-1)
    truncated = torch.tensor(finished_by_length, dtype=torch.bool) & ~has_eos

    rollout = None
    if logprobs and all(lp is not None for lp in logprobs):
        rollout = torch.zeros(len(rows), width, dtype=torch.float32)
        for i, lp in enumerate(logprobs):
            rollout[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
        rollout = torch.where(response_mask.bool(), rollout, torch.zeros(()))

    p = max(len(ids) for ids in prompt_ids)
    prompts = torch.full((len(prompt_ids), p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(len(prompt_ids), p, dtype=torch.long)
    for i, ids in enumerate(prompt_ids):
        if ids:
            prompts[i, p - len(ids):] = torch.tensor(ids, dtype=torch.long)
            prompt_mask[i, p - len(ids):] = 1
    completions = [decode(ids[m.bool()].tolist()) for ids, m in zip(response_ids, response_mask)]
    return Generation(prompt_ids=prompts.repeat_interleave(n, 0), prompt_mask=prompt_mask.repeat_interleave(n, 0),
                      response_ids=response_ids, response_mask=response_mask, truncated=truncated,
                      completions=completions, rollout_logprobs=rollout)


def vllm_prompts(prompt_ids: list[list[int]], images: list[tuple] | None = None,
                 image_inputs: list[dict | None] | None = None) -> list[dict]:
    """vLLM's prompts: each prompt's token ids, and its PIL images as ``multi_modal_data`` where
    it has any. A prompt with image inputs but no images is an error (vLLM reads the images)."""
    for name, given in (("images", images), ("image_inputs", image_inputs)):
        if given is not None and len(given) != len(prompt_ids):
            raise ValueError(f"{name} has {len(given)} entries for {len(prompt_ids)} prompts: give one per prompt")
    out = []
    for i, ids in enumerate(prompt_ids):
        row = list(images[i] or ()) if images is not None else []
        if not row and image_inputs is not None and image_inputs[i] is not None:
            raise ValueError(f"prompt {i} has image inputs but no images: the vLLM engine needs each prompt's "
                             "PIL images (generate(..., images=[...]))")
        out.append({"prompt_token_ids": list(ids), **({"multi_modal_data": {"image": row}} if row else {})})
    return out


def _build_llm(llm_class, kwargs: dict):
    """``(LLM(**kwargs), processed log-probs?)``, dropping the options an older vLLM does not
    know (each named in its error) one at a time."""
    optional = ("logprobs_mode", "enable_sleep_mode", "generation_config")
    kwargs = dict(kwargs)
    while True:
        try:
            return llm_class(**kwargs), "logprobs_mode" in kwargs
        except (TypeError, ValueError) as exc:
            unknown = [k for k in optional if k in kwargs and k in str(exc)]
            if not unknown:
                raise
            for k in unknown:
                del kwargs[k]


class VLLMEngine:
    """Samples ``n`` responses per prompt with a colocated vLLM (see the module docstring)."""

    def __init__(self, model, tokenizer, rollout_config, *, seed: int = 0, max_model_len: int | None = None):
        vllm = _import_vllm()
        if not torch.cuda.is_available():
            raise ConfigError("rollout.engine = 'vllm' needs a CUDA GPU and none is available; use rollout.engine=hf")
        hf = _hf_model(model)
        if hasattr(hf, "peft_config") or hasattr(model, "peft_config"):
            raise ConfigError("rollout.engine = 'vllm' with model.lora.enabled is not supported yet")
        path = getattr(hf.config, "_name_or_path", None) or getattr(hf, "name_or_path", None)
        if not path:
            raise ConfigError("rollout.engine = 'vllm' needs a model loaded from a directory or hub name")
        self.model, self.tokenizer, self.config = model, tokenizer, rollout_config
        self.eos_ids = eos_token_ids(tokenizer, hf)
        self.sleep_mode = bool(rollout_config.vllm.sleep_mode)
        dtype = rollout_config.dtype or computed_dtype_of(hf) or next(hf.parameters()).dtype  # docs/precision.md
        kwargs = {
            "model": path,
            "tokenizer": getattr(tokenizer, "name_or_path", None) or path,
            "dtype": str(dtype).removeprefix("torch."),
            "seed": seed,
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": rollout_config.vllm.gpu_memory_utilization,
            "enable_sleep_mode": self.sleep_mode,
            "logprobs_mode": "processed_logprobs",
            "generation_config": "vllm",  # the model's generation_config.json must not change the sampling
        }
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if dist.world_size() > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm, processed = _build_llm(vllm.LLM, kwargs)
        correction = getattr(rollout_config, "correction", None)
        corrects = rollout_config.tis_cap is not None or (
            correction is not None and (correction.mode is not None or correction.bypass))
        if not processed and (rollout_config.temperature != 1.0 or corrects):
            raise ConfigError("this vLLM returns log-probs before temperature scaling (no logprobs_mode); "
                              "rollout.engine=vllm with rollout.temperature != 1, rollout.tis_cap or "
                              "rollout.correction needs vllm >= 0.10.2")
        self._sampling_params = vllm.SamplingParams
        self._stale = True  # the training weights may differ from the checkpoint vLLM loaded (resume)
        self._asleep = False
        self._held = 0  # inside awake(): no sleep between generate calls

    def update_weights(self, model) -> None:
        """The training weights changed: push them before the next generation."""
        self.model = model
        self._stale = True

    def _push_weights(self) -> None:
        weights = _named_weights(self.model)
        if hasattr(self.llm, "collective_rpc"):
            self.llm.collective_rpc(_load_weights_on_worker, args=(weights,))
        else:
            raise RuntimeError("this vLLM has no LLM.collective_rpc to load new weights into; "
                               "steadyrl's vLLM engine needs vllm >= 0.8")
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self._stale = False

    def _sleep(self) -> None:
        if self.sleep_mode and hasattr(self.llm, "sleep") and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    @contextlib.contextmanager
    def awake(self):
        """Several ``generate`` calls in a row (the turns of episodes) without sleeping in between."""
        self._held += 1
        try:
            yield self
        finally:
            self._held -= 1
            if not self._held:
                self._sleep()

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 do_sample: bool = True, image_inputs: list[dict | None] | None = None,
                 images: list[tuple] | None = None) -> Generation:
        """``images``: each prompt's PIL images (vLLM reads them); ``image_inputs``: the same as the
        processor's tensors, returned per row for the trainer (module doc)."""
        prompts = vllm_prompts(prompt_ids, images, image_inputs)
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
        if self._stale:
            self._push_weights()
        params = self._sampling_params(
            n=n, temperature=temperature if do_sample else 0.0, top_p=top_p if do_sample else 1.0,
            top_k=top_k if do_sample and top_k > 0 else -1, max_tokens=max_new_tokens, logprobs=0,
            stop_token_ids=list(self.eos_ids))
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        finally:
            if not self._held:
                self._sleep()
        gen = generation_from_outputs(outputs, prompt_ids, n, pad_id=self.tokenizer.pad_token_id,
                                      eos_ids=self.eos_ids, max_new_tokens=max_new_tokens,
                                      decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True))
        if image_inputs is not None and any(x is not None for x in image_inputs):
            gen.image_inputs = repeat_image_inputs(image_inputs, n)
        return gen
