"""The asynchronous rollout worker: a process with its own copy of the policy that generates.

Started by :mod:`.asynchronous` with the ``spawn`` method (the trainer holds torch's thread pools,
which a ``fork`` would copy in an undefined state), it rebuilds the model from its config, pins
itself to one CPU thread and then serves messages from the trainer in order, over a pipe:

* ``weights`` — a full state dict and its policy version, loaded before the next request;
* ``generate`` — prompt ids and sampling settings: the batch is sampled with the HF engine and,
  when asked, the log-probs of the sampled tokens under the weights that sampled them (the
  behaviour policy's, ``Generation.rollout_logprobs``) come back with it, with the worker's RNG
  state after the batch and the policy version it was generated with;
* ``stop``.

Messages are ``torch.save`` d dicts of tensors and plain data, read with
``torch.load(weights_only=True)`` on both sides: no pickle of arbitrary objects crosses the pipe
after the start (the start itself pickles the tokenizer and the model config, our own objects).
The worker dies with the trainer: Linux's ``PR_SET_PDEATHSIG`` kills it when the trainer process
ends, however it ends (SIGKILL included), and a closed pipe ends its loop.
"""

from __future__ import annotations

import ctypes
import io
import os
import signal
import traceback

import torch

PR_SET_PDEATHSIG = 1


def encode(message: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def decode(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def generation_to_dict(gen) -> dict:
    """A single-turn :class:`~steadyrl.rollout.base.Generation` as tensors and strings."""
    return gen.encoded()


def generation_from_dict(data: dict):
    from ..rollout.base import Generation

    return Generation(**data)


def _die_with_parent(parent: int) -> None:
    """Be killed when the trainer process ends (Linux); exit now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):  # not Linux: the closed pipe still ends the loop
        pass
    if os.getppid() != parent:
        os._exit(0)


def _build(init: dict):
    from transformers import AutoModelForCausalLM

    from ..models import disable_dropout
    from ..rollout.hf import HFEngine

    kwargs = {"dtype": init["dtype"]}
    if init.get("attn_implementation"):
        kwargs["attn_implementation"] = init["attn_implementation"]
    model = AutoModelForCausalLM.from_config(init["model_config"], **kwargs)
    if init.get("generation_config") is not None:
        model.generation_config = init["generation_config"]
    disable_dropout(model)
    model.eval()
    engine = HFEngine(model, init["tokenizer"], batch_size=init["batch_size"], share_prefix=init["share_prefix"])
    return model, engine


@torch.no_grad()
def _behaviour_logprobs(model, gen, init: dict) -> torch.Tensor:
    from ..trainer.batch import batch_from_generation, micro_batches
    from ..trainer.forward import response_logprobs

    batch = batch_from_generation(gen)
    kwargs = init["logprob_kwargs"]
    return torch.cat([response_logprobs(model, batch.select(mb), **kwargs)[0].float()
                      for mb in micro_batches(len(batch), init["micro_batch_size"])])


def _generate(model, engine, request: dict, init: dict) -> dict:
    if request.get("rng") is not None:
        torch.set_rng_state(request["rng"])
    gen = engine.generate(request["prompt_ids"], request["n"], **request["sampling"])
    if request["logprobs"]:
        gen.rollout_logprobs = _behaviour_logprobs(model, gen, init)
    return generation_to_dict(gen)


def main(conn, init: dict, parent: int) -> None:
    """The worker process: serve the trainer's messages until ``stop`` or a closed pipe."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle: it stops the worker
    torch.set_num_threads(1)
    version = None
    try:
        model, engine = _build(init)
        while True:
            message = decode(conn.recv_bytes())
            kind = message["kind"]
            if kind == "stop":
                break
            if kind == "weights":
                model.load_state_dict(message["state"])
                version = message["version"]
            elif kind == "generate":
                gen = _generate(model, engine, message, init)
                conn.send_bytes(encode({"kind": "result", "step": message["step"], "version": version,
                                        "gen": gen, "rng": torch.get_rng_state()}))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the trainer is gone
    except BaseException:  # noqa: BLE001 - every failure goes back to the trainer as text
        try:
            conn.send_bytes(encode({"kind": "error", "traceback": traceback.format_exc()}))
        except (OSError, EOFError):
            pass
        raise SystemExit(1) from None
