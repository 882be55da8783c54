"""The built-in demo as a task like any user's: :class:`DemoTask`, whose hooks the build step
calls as it calls a user's task's (:class:`steadyrl.assembly.task.Task`), and the builders behind them.

* :func:`demo_task` — its records (train, held-out) and its reward, in place of data files and
  ``rewards`` (``demo.task``: string reversal, the calculator tool, or the coloured squares'
  codeword);
* :func:`demo_model` — its model, built and warm-started in the run directory (in place of
  ``model.name_or_path``);
* :func:`transcript_printer` — what it shows before and after RL: the tool demo's greedy
  episode on its first held-out prompt (nothing for the reversal demo).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import RewardSpec


def demo_task(config: Config) -> tuple[list[dict], list[dict], list[RewardSpec]]:
    """The built-in demo's records (train, held-out) and its reward."""
    from ..demo import make_splits, reverse_reward

    demo = config.demo
    if demo.task == "tool":
        return _tool_demo_task(config)
    if demo.task == "vision":
        return _vision_demo_task(config)
    try:
        train, evals = make_splits(demo.num_train, demo.num_eval, min_len=demo.min_len,
                                   max_len=demo.max_len, seed=config.trainer.seed)
    except ValueError as exc:
        raise ConfigError(f"demo.num_train / demo.num_eval with demo.min_len..demo.max_len: {exc}") from None
    return train, evals, [RewardSpec(name="reverse", fn=reverse_reward, weight=1.0, timeout_s=60.0)]


def _tool_demo_task(config: Config) -> tuple[list[dict], list[dict], list[RewardSpec]]:
    from ..demo.tool_task import make_tool_splits, tool_answer_reward

    demo = config.demo
    mt = config.rollout.multi_turn
    if not mt.tools and mt.agent is None:  # an agent brings its own calculator
        from ..demo.tool_demo import TOOL_SPEC

        raise ConfigError(f"demo.task = 'tool' needs the calculator in rollout.multi_turn.tools "
                          f"(rollout.multi_turn.tools=[{TOOL_SPEC}]); "
                          "'steadyrl train demo.task=tool' without a config file sets it")
    try:
        train, evals = make_tool_splits(demo.num_train, demo.num_eval, seed=config.trainer.seed)
    except ValueError as exc:
        raise ConfigError(f"demo.num_train / demo.num_eval: {exc}") from None
    return train, evals, [RewardSpec(name="answer", fn=tool_answer_reward, weight=1.0, timeout_s=60.0)]


def _vision_demo_task(config: Config) -> tuple[list[dict], list[dict], list[RewardSpec]]:
    from ..demo.vision_task import codeword_reward, make_vision_splits

    demo = config.demo
    try:
        train, evals = make_vision_splits(demo.num_train, demo.num_eval, max_images=demo.max_images,
                                          seed=config.trainer.seed)
    except ValueError as exc:
        raise ConfigError(f"demo.num_train / demo.num_eval / demo.max_images: {exc}") from None
    # the exact codeword: measured against partial credit per letter (codeword_partial_reward), which
    # climbs faster for 50 steps and then stalls near 77% held-out, where the exact reward reaches 100%
    return train, evals, [RewardSpec(name="codeword", fn=codeword_reward, weight=1.0, timeout_s=60.0)]


def _build_demo_model(config: Config, train: list[dict]):
    """``(model, tokenizer)`` of ``demo.task``, warm-started (the vision task's processor in
    place of the tokenizer: it saves the tokenizer, the image processor and the template)."""
    demo, seed = config.demo, config.trainer.seed
    if demo.task == "vision":
        from ..demo.vision_warmstart import build_vision_demo

        model, processor, info = build_vision_demo(demo, train, seed=seed)
        print(f"warm-start: {info['steps']} supervised steps on the format in {info['seconds']:.1f}s, "
              f"loss {info['loss_first']:.3f} -> {info['loss_last']:.3f}", flush=True)
        return model, processor
    if demo.task == "tool":
        from ..demo.tool_demo import build_tool_demo

        model, tokenizer, info = build_tool_demo(demo, train, seed=seed)
        phases = ", ".join(f"{name} {p['steps']} steps, loss {p['loss_first']:.3f} -> {p['loss_last']:.3f}"
                           for name, p in info.items() if isinstance(p, dict))
        print(f"warm-start ({phases or 'none'}) in {info['seconds']:.1f}s", flush=True)
        return model, tokenizer
    from ..demo import build_char_tokenizer, build_tiny_model, warm_start
    from ..demo.task import VOCAB_CHARS

    tokenizer = build_char_tokenizer(VOCAB_CHARS)
    model = build_tiny_model(tokenizer, n_layers=demo.n_layers, hidden_size=demo.hidden_size,
                             n_heads=demo.n_heads, seed=seed)
    if demo.warmstart_steps:
        info = warm_start(model, tokenizer, train, steps=demo.warmstart_steps, lr=demo.warmstart_lr,
                          batch_size=demo.warmstart_batch_size, seed=seed)
        print(f"warm-start: {info['steps']} supervised steps in {info['seconds']:.1f}s, "
              f"loss {info['losses'][0]:.3f} -> {info['losses'][-1]:.3f}", flush=True)
    return model, tokenizer


def demo_model(config: Config, output_dir: Path, train: list[dict]) -> str:
    """A tiny model, warm-started on the demo task and saved to ``output_dir/warmstart``
    (reused when it is already there, e.g. on ``--resume``). Returns its directory."""
    from .. import distributed as dist

    warm = output_dir / "warmstart"
    if not (warm / "config.json").is_file() and dist.is_main():
        model, tokenizer = _build_demo_model(config, train)
        tmp = output_dir / ".tmp-warmstart"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, warm)
    dist.barrier()
    return str(warm)


def transcript_printer(config: Config, eval_prompts: list, tokenizer, driver, device):
    """``show(engine, when)``: prints the tool demo's greedy episode on its first held-out prompt
    (``when``: before / after RL); does nothing for other tasks."""
    if not (config.demo.task == "tool" and eval_prompts):
        return lambda engine, when: None

    def show(engine, when: str) -> None:
        import torch

        from .. import distributed as dist

        if not dist.is_main():
            return
        from ..rollout.driver import rollout
        from ..printable import printable
        from ..demo.tool_task import format_transcript

        prompt = eval_prompts[0]
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            gen = rollout(engine, tokenizer, driver, [prompt], 1, config.rollout, do_sample=False)  # the run's
        episode = gen.episodes[0]
        turns = list(episode.messages) or [{"role": "assistant", "content": gen.completions[0]}]
        text = format_transcript(prompt.messages or prompt.text, turns)
        if episode.truncation:  # its last turn, in the list as sampled, is where it was cut
            text += f"\n  [episode cut by rollout.{episode.truncation}]"
        print(f"held-out transcript {when} RL:\n{printable(text)}", flush=True)  # control characters escaped

    return show


class DemoTask:
    """The built-in demo (:class:`steadyrl.assembly.task.Task`): its records and reward in place of
    data files and ``rewards``, its model built and warm-started in the run directory in place of
    ``model.name_or_path`` (so nothing is checked before the directory is touched: the model does
    not exist yet), the tool demo's transcript before and after RL."""

    resume_keys: tuple[str, ...] = ("demo",)  # the demo's settings built its model and its records

    def records(self, config: Config, for_eval: bool, quiet: bool = False):
        from .sources import load_all_data

        train, evals, specs = demo_task(config)
        train, evals, train_parts, eval_parts = load_all_data(config, for_eval=for_eval, quiet=quiet,
                                                              demo=(train, evals))
        if config.rollout.multi_turn.environment is not None:  # the environment's rewards alone
            specs = []
        return train, evals, train_parts, eval_parts, specs

    def check_model(self, config: Config, inputs) -> None:
        _refuse_a_model(config)  # the model is built by :meth:`model`, in the run directory

    def model(self, config: Config, output_dir: Path, inputs):
        from .prompts import tokenize_prompts

        return tokenize_prompts(config, demo_model(config, output_dir, inputs.train_records), inputs)

    def show(self, config: Config, run):
        return transcript_printer(config, run.task.eval_prompts, run.models.tokenizer, run.task.driver, run.device)

    def check_eval(self, config: Config, model_path: str, of_run_dir: bool) -> None:
        if not of_run_dir and not config.data.eval_path:
            # the demo's held-out strings are meant for the demo's own model, not for this one
            raise ConfigError(
                f"nothing to evaluate model {model_path!r} on: data.eval_path is not set (without a config, "
                "held-out prompts would be the built-in string-reversal demo's); give a config with "
                "data.eval_path, or data.eval_path=FILE; a demo run is evaluated with --output-dir RUN_DIR")

    def preflight_train(self, config: Config) -> None:
        _refuse_a_model(config)  # its records are generated and its model built in the run directory

    def preflight_eval(self, config: Config, model_path: str | None, of_run_dir: bool) -> None:
        self.check_eval(config, model_path, of_run_dir)


def _refuse_a_model(config: Config) -> None:
    """The demo trains its own model: a ``model.name_or_path`` would be ignored, so it is refused
    (exit 2), as ``model.gguf_file`` is."""
    if config.model.name_or_path is not None:
        raise ConfigError(
            f"model.name_or_path = {config.model.name_or_path!r} but data.train_path is not set: the built-in "
            "demo trains its own model and would ignore it; set data.train_path (and data.eval_path) to train "
            "this model on your data, or leave model.name_or_path unset for the demo")
