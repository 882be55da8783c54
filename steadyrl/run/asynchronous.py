"""Asynchronous rollouts with a staleness bound (``rollout.asynchronous.max_staleness``).

A rollout worker process (:mod:`.rollout_worker`) holds its own copy of the policy. The batch of
step ``t`` is requested right after the weights of version ``t - 1 - N`` were pushed (version =
training steps done, ``N = max_staleness``), so it is generated while steps ``t - N .. t - 1``
train, and the step that trains on it is at most ``N`` versions ahead:

    staleness(t) = (t - 1) - version(t) <= N

The schedule is fixed by the step number, not by timing, so a run is reproducible. The worker
processes requests and weight pushes in order, with one RNG stream of its own (seeded from the
trainer's at the start). With ``N = 0`` the request carries the trainer's RNG state and the state
after generation comes back into the trainer: the run is the synchronous run, step for step.
With ``N >= 1`` the behaviour policy's log-probs come back with the samples and the update
corrects for the mismatch with truncated importance sampling (``rollout.tis_cap``).

What a draw produces is what :func:`steadyrl.trainer.dynamic.draw_batch` produces (prompts, Generation, ScoreResult);
scoring stays in the trainer. A checkpoint completes the batches in flight and holds them, with
the worker's RNG state after the last one (:meth:`AsyncRollouts.state_dict`); a resumed run
trains on them and continues the worker's stream, so it replays the uninterrupted run exactly.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time

import torch

from ..errors import ConfigError, RolloutWorkerError
from ..models import unwrap
from ..data.prompts import PromptItem
from ..rewards.scorer import score_episodes
from ..rollout import DTYPES
from ..rollout.driver import Draw
from ..vlm import is_vision_config
from .rollout_worker import decode, encode, generation_from_dict, main

POLL_S = 0.5


def _prompt_dict(p: PromptItem) -> dict:
    return {"text": p.text, "ids": list(p.ids), "columns": dict(p.columns), "messages": p.messages,
            "conversation": p.conversation}


class AsyncRollouts:
    """The trainer's side: requests batches ahead, receives them, pushes weights, checkpoints."""

    def __init__(self, run, saved: dict | None = None):
        # on one CPU process only: refused otherwise before any model loads (steadyrl.config.compat)
        cfg = run.config
        self.run, self.staleness = run, cfg.rollout.asynchronous.max_staleness
        self.ready: dict[int, dict] = {}  # step -> the worker's result (decoded), not yet trained on
        self.prompts: dict[int, list] = {}  # step -> its PromptItems
        self.submitted = run.state.step  # the last step whose batch was requested
        self.last_rng = None  # the worker's RNG state after the last requested batch
        rng = torch.get_rng_state()
        if saved:
            for item in saved["batches"]:
                self.ready[item["step"]] = item["result"]
                self.prompts[item["step"]] = [PromptItem(**p) for p in item["prompts"]]
            self.submitted = max([run.state.step, *self.ready])
            rng = saved["rng"] if saved["rng"] is not None else rng
            self.last_rng = saved["rng"]
        self._start(run, rng)

    def _start(self, run, rng: torch.Tensor) -> None:
        cfg, policy = run.config, unwrap(run.models.policy)
        init = {"model_config": policy.config, "generation_config": getattr(policy, "generation_config", None),
                "dtype": DTYPES[cfg.rollout.dtype] if cfg.rollout.dtype else next(policy.parameters()).dtype,
                "tokenizer": run.models.tokenizer,
                "attn_implementation": getattr(policy.config, "_attn_implementation", None),
                "batch_size": cfg.rollout.generation_batch_size, "share_prefix": cfg.trainer.share_prompt_prefix,
                "micro_batch_size": cfg.trainer.micro_batch_size,
                "logprob_kwargs": {"temperature": cfg.rollout.temperature, "impl": cfg.trainer.logprob_impl,
                                   "share_prefix": cfg.trainer.share_prompt_prefix,
                                   "chunk_size": cfg.trainer.logprob_chunk_size}}
        context = multiprocessing.get_context("spawn")  # never fork a process that holds torch threads
        self.conn, child = context.Pipe()
        self.process = context.Process(target=main, args=(child, init, os.getpid()), daemon=True,
                                       name="steadyrl-rollout-worker")
        self.process.start()
        child.close()
        # A sender thread writes to the pipe: a weight push (megabytes through a 64 KiB pipe buffer,
        # one context switch per chunk) would otherwise block the trainer until the worker read it all.
        self._outbox: queue.Queue = queue.Queue()
        self._send_error: BaseException | None = None
        self._sender = threading.Thread(target=self._send_loop, daemon=True, name="steadyrl-rollout-sender")
        self._sender.start()
        self.push(run.state.step)
        self.rng_for_worker = rng  # the stream the first request starts from (N >= 1)

    def _send_loop(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                self.conn.send_bytes(encode(message))
            except (OSError, EOFError) as exc:  # the worker is gone: said by the next _send / _receive
                self._send_error = exc
                return

    def _send(self, message: dict) -> None:
        """Queue ``message`` for the worker (sent in order); its tensors must not change afterwards."""
        if self._send_error is not None:
            self._died()
        self._outbox.put(message)

    def _died(self, text: str | None = None):
        self.process.join(timeout=5)
        try:  # a worker that failed while the trainer was sending left its traceback in the pipe
            while text is None and self.conn.poll(0):
                message = decode(self.conn.recv_bytes())
                text = message.get("traceback")
        except (EOFError, OSError):
            pass
        detail = f":\n{text}" if text else f" (exit status {self.process.exitcode})"
        raise RolloutWorkerError(f"the rollout worker (rollout.asynchronous) failed{detail}")

    def push(self, version: int) -> None:
        """The policy's weights after ``version`` training steps, for the requests that follow."""
        state = {k: v.detach().cpu().clone() for k, v in unwrap(self.run.models.policy).state_dict().items()}
        self._send({"kind": "weights", "version": version, "state": state})
        self.version = version

    def _submit(self, step: int) -> None:
        ro = self.run.config.rollout
        prompts = self.run.task.sampler.next_batch()
        self.prompts[step] = prompts
        rng = None
        if self.staleness == 0:
            rng = torch.get_rng_state()  # the trainer's stream: the synchronous run's samples
        elif self.rng_for_worker is not None:
            rng, self.rng_for_worker = self.rng_for_worker, None  # seeds the worker's own stream once
        sampling = {"max_new_tokens": ro.max_new_tokens, "temperature": ro.temperature, "top_p": ro.top_p,
                    "top_k": ro.top_k}
        self._send({"kind": "generate", "step": step, "prompt_ids": [list(p.ids) for p in prompts],
                    "n": ro.group_size, "sampling": sampling, "rng": rng,
                    # the behaviour policy differs from the trainer's when stale or in another precision
                    "logprobs": self.staleness > 0 or ro.dtype is not None})
        self.submitted = step

    def _receive(self) -> None:
        while not self.conn.poll(POLL_S):
            if not self.process.is_alive() or self._send_error is not None:
                self._died()
        try:
            message = decode(self.conn.recv_bytes())
        except (EOFError, ConnectionResetError):
            self._died()
        if message["kind"] == "error":
            self._died(message["traceback"])
        self.ready[message["step"]] = message
        self.last_rng = message["rng"]

    def take(self, step: int) -> tuple[Draw, dict[str, float]]:
        """Step ``step``'s batch as :func:`steadyrl.trainer.dynamic.draw_batch` returns it, and its age metrics."""
        t0 = time.perf_counter()
        last = min(step + self.staleness, self.run.total_steps)
        while self.submitted < last:
            self._submit(self.submitted + 1)
        while step not in self.ready:
            self._receive()
        message = self.ready.pop(step)
        if self.staleness == 0:
            torch.set_rng_state(message["rng"])
        age = (step - 1) - message["version"]
        if not 0 <= age <= self.staleness:
            raise RuntimeError(f"step {step} got a batch of policy version {message['version']}: "
                               f"{age} versions old, beyond rollout.asynchronous.max_staleness = {self.staleness}")
        gen, prompts = generation_from_dict(message["gen"]), self.prompts.pop(step)
        t1 = time.perf_counter()
        n = self.run.config.rollout.group_size
        samples = [p for p in prompts for _ in range(n)]
        result = score_episodes(self.run.task.scorer, samples, gen, environment=False)
        metrics = {"rollout/staleness_mean": float(age), "rollout/staleness_max": float(age),
                   "rollout/policy_version": float(message["version"]), "time/rollout_wait_s": t1 - t0}
        return Draw(prompts, gen, result, t1 - t0, time.perf_counter() - t1), metrics

    def state_dict(self) -> dict:
        """The batches in flight, completed, and the worker's RNG state after the last of them."""
        while any(s not in self.ready for s in range(self.run.state.step + 1, self.submitted + 1)):
            self._receive()
        batches = [{"step": s, "prompts": [_prompt_dict(p) for p in self.prompts[s]], "result": self.ready[s]}
                   for s in sorted(self.ready)]
        rng = self.last_rng if batches else None
        return {"max_staleness": self.staleness, "batches": batches, "rng": rng}

    def close(self) -> None:
        """Stop the worker (killed when it does not stop in a few seconds)."""
        self._outbox.put({"kind": "stop"})
        self._outbox.put(None)
        self._sender.join(timeout=10)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._sender.join(timeout=10)
        self.conn.close()


def start_rollouts(run, saved: dict | None) -> AsyncRollouts | None:
    """The asynchronous rollout worker, with a checkpoint's batches in flight (``saved``); None
    when ``rollout.asynchronous.max_staleness`` is not set. The caller closes it."""
    staleness = run.config.rollout.asynchronous.max_staleness
    if staleness is not None and is_vision_config(getattr(unwrap(run.models.policy), "config", None)):
        raise ConfigError(  # the worker builds a causal LM from the config and sends no image inputs
            f"rollout.asynchronous.max_staleness = {staleness} with a vision-language model: the asynchronous "
            "rollout worker generates text only; set rollout.asynchronous.max_staleness=null")
    if saved and saved["batches"] and saved["max_staleness"] != staleness:
        raise ConfigError(
            f"rollout.asynchronous.max_staleness = {staleness}, but the checkpoint was written with "
            f"{saved['max_staleness']} and holds {len(saved['batches'])} batches generated ahead; resume with "
            f"rollout.asynchronous.max_staleness={saved['max_staleness']}")
    return AsyncRollouts(run, saved) if staleness is not None else None
