"""What a run trains on and is scored by: the data records (train, held-out, per source), the
reward functions that score them (the task's default when no config names any), checked against
each other before any model loads.

A run's task is a :class:`Task`: a user's (:class:`DataTask`: data files, ``model.name_or_path``)
or the built-in demo's (:class:`steadyrl.assembly.demo.DemoTask`: records, reward and model built
locally); :func:`task_of` is the one place that chooses (no data in the config: the demo). The
build step calls the same hooks, in the same order, whichever it is:

1. ``records`` (records and default rewards) -> ``check_model`` (before the run directory is
   touched: the user's model paths and prompts checked against it, returned as
   :class:`~.prompts.Prompts`; the demo's: None, its model is not built yet);
2. ``model`` (after it: the model's :class:`~.prompts.Prompts`, the demo's built there) -> ``show``
   (what the task prints before and after RL); ``check_eval`` for ``steadyrl eval``;
   ``resume_keys`` for ``--resume``.

The hooks return what they make; none fills in the object it is given.

``task_inputs`` is the one entry for records and rewards: :mod:`.setup` calls it for training
(``check_inputs``) and for ``steadyrl eval`` (``build_eval``). Its checks, :func:`check_task`, import
no torch: the command line runs them before it loads torch (:mod:`steadyrl.preflight.inputs`), so a
typo is answered in a moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import RewardSpec, load_reward
from ..sandbox import Limits
from .sources import by_domain, check_domains, load_all_data
from ..trainer.parts import show_nothing

NOTHING_TO_EVALUATE = "nothing to evaluate: set data.eval_path to a file of held-out prompts"

if TYPE_CHECKING:
    from .inputs import Inputs, Task
    from ..rollout.base import Engine
    from ..trainer.parts import Run
    from .prompts import Prompts

__all__ = ["DataTask", "task_of", "task_inputs", "check_task", "build_rewards", "check_reward_columns"]


class DataTask:
    """A user's task: records from ``data.*``, rewards from ``rewards`` (default ``math``), the
    model ``model.name_or_path``, checked with its prompts before anything is written."""

    resume_keys: tuple[str, ...] = ()

    def records(self, config: Config, for_eval: bool, quiet: bool = False):
        train, evals, train_parts, eval_parts = load_all_data(config, for_eval=for_eval, quiet=quiet)
        default = []
        mt = config.rollout.multi_turn
        alone = mt.environment is not None or mt.agent is not None  # their rewards alone
        if not config.rewards and not alone:  # built only when used: math_verify takes 0.5 s to load
            default = [RewardSpec(name="math", fn=load_reward("math"), weight=1.0, timeout_s=60.0)]
        return train, evals, train_parts, eval_parts, default

    def check_model(self, config: Config, inputs: Inputs) -> Prompts:
        from ..gguf_model import model_source
        from ..model_files import check_model_paths
        from .prompts import check_context_length, tokenize_prompts

        model_path = model_source(config)  # model.gguf_file: its converted, cached copy
        check_model_paths(config, model_path)
        prompts = tokenize_prompts(config, model_path, inputs)
        try:
            check_context_length(config, model_path, prompts.train_prompts, prompts.eval_prompts)
        except BaseException:
            if prompts.agent is not None:
                prompts.agent.shutdown()
            raise
        return prompts

    def model(self, config: Config, output_dir: Path, inputs: Inputs) -> Prompts:
        return inputs.prompts

    def show(self, config: Config, run: Run) -> Callable[[Engine, str], None]:
        return show_nothing

    def check_eval(self, config: Config, model_path: str, of_run_dir: bool) -> None:
        return None

    def preflight_train(self, config: Config) -> None:
        from .agent import check_agent_specs
        from ..gguf_model import check_gguf_file
        from ..model_files import check_model_paths

        check_task(config, quiet=True)
        check_agent_specs(config)
        if config.model.gguf_file:  # converted when the run starts; its header is checked now
            check_gguf_file(config)
        else:
            check_model_paths(config, config.model.name_or_path)

    def preflight_eval(self, config: Config, model_path: str | None, of_run_dir: bool) -> None:
        from .agent import check_agent_specs
        from ..model_files import check_model_source

        _, evals, _, _ = check_task(config, for_eval=True, quiet=True)
        if not evals:
            raise ConfigError(NOTHING_TO_EVALUATE)
        check_agent_specs(config)
        if model_path is not None:
            check_model_source("model.name_or_path", model_path)


def task_of(config: Config) -> Task:
    """The run's task: the built-in demo's when the config names no training data
    (``Config.is_demo``), else the user's. The one place that reads ``is_demo`` to choose: the build
    step and the trainer call the task's hooks and never branch on it."""
    if config.is_demo:
        from .demo import DemoTask

        return DemoTask()
    return DataTask()


def task_inputs(config: Config, *, for_eval: bool = False):
    """``(train, evals, scorer, (train_parts, eval_parts))``: train and held-out records, the
    scorer, and the records per source (``data.train_sources`` / ``eval_sources``, else None):
    every data and reward input checked (:func:`check_task`).

    Held-out prompts come from ``data.eval_path`` when it is set, else from the task's own split.
    """
    from ..rewards.scorer import Scorer

    train, evals, specs, parts = check_task(config, for_eval=for_eval)
    mt = config.rollout.multi_turn
    alone = mt.environment is not None or mt.agent is not None  # their rewards alone
    # a dry call of your own functions on the first row, before step 1 (episodes add columns: not there)
    probe = None if alone or config.rollout.multi_turn.enabled else next(iter(train or evals or []), None)
    # the demo's own reward, with no rewards: written, scores only what a rollout.multi_turn.agent left to it (None)
    fallback = config.is_demo and not config.rewards and config.rollout.multi_turn.agent is not None
    return train, evals, Scorer(specs, allow_empty=alone, domain_key=config.data.domain_key, probe=probe,
                                agent_fallback=fallback), parts


def check_task(config: Config, *, for_eval: bool = False, quiet: bool = False):
    """``(train, evals, reward specs, (train_parts, eval_parts))``, every data and reward input
    checked: files, columns, reward specs, domains. Imports no torch unless a reward does (a reward
    model); ``quiet``: no console notes."""
    train, evals, train_parts, eval_parts, default_specs = task_of(config).records(config, for_eval, quiet)
    environment = config.rollout.multi_turn.environment is not None
    agent = config.rollout.multi_turn.agent is not None
    specs = build_rewards(config, default=default_specs)
    names = [s.name for s in specs] + (["environment"] if environment else []) + (["agent"] if agent else [])
    wanted = config.eval.accuracy_reward
    if wanted is not None and wanted not in names:
        raise ConfigError(f"eval.accuracy_reward = {wanted!r} is not one of the configured rewards {names}")
    provided = ("turns",) if config.rollout.multi_turn.enabled else ()  # an episode's turn list, given at scoring
    parts = ([(f"data.train_sources {p.name!r}", p.records) for p in train_parts] if train_parts is not None
             else [("data.train_path", train)])
    parts += ([(f"data.eval_sources {p.name!r}", p.records) for p in eval_parts] if eval_parts is not None
              else [("data.eval_path", evals)])
    check_domains(config, specs, parts, all_data=not for_eval)
    key = config.data.domain_key
    for where, records in parts:  # each domain's rows against the rewards that apply to that domain
        for domain, rows in by_domain(records, key).items():
            applying = [s for s in specs if key is None or s.domains is None or domain in s.domains]
            check_reward_columns(applying, rows, where, provided)
    return train, evals, specs, (train_parts, eval_parts)


def check_reward_columns(specs: list[RewardSpec], records: list[dict], source: str,
                         provided: tuple[str, ...] = ()) -> None:
    """A reward that reads a column (the built-in verifiers read the gold answer) needs it in
    every record: found here, not as a failure on every sample of every step."""
    if not records:
        return
    columns = sorted(records[0])
    for spec in specs:
        for column in getattr(spec.fn, "reads_columns", ()):
            if column in records[0] or column in provided:
                continue
            fix = ("set data.answer_key to the column of your file that holds the gold answer (rewards "
                   "receive it as 'answer'), or the reward's option answer_key" if column == "answer" else
                   f"check that the file has a column {column!r} (and that data.extra_keys, when set, lists it)")
            raise ConfigError(f"rewards: {spec.name!r} reads column {column!r}, but the records of {source} "
                              f"have columns {columns}; {fix}")


def build_rewards(config: Config, default: list[RewardSpec]) -> list[RewardSpec]:
    if not config.rewards:
        return default
    # the config has checked the keys (label, else the function's short name) are unique
    specs = []
    for i, r in enumerate(config.rewards):
        try:
            fn = load_reward(r.name, **r.options)
        except ConfigError as err:  # say which entry: two entries may use the same reward
            raise type(err)(f"rewards[{i}]: {err}") from None
        chunk = r.chunk_size
        if "chunk_size" not in r.model_fields_set and hasattr(fn, "preferred_chunk_size"):
            chunk = fn.preferred_chunk_size  # a model or server reward batches its own calls
        specs.append(RewardSpec(name=r.key, fn=fn, weight=r.weight, timeout_s=r.timeout_s, isolation=r.isolation,
                                chunk_size=chunk, limits=Limits(**r.limits.model_dump()),
                                env_passthrough=tuple(r.env_passthrough), domains=r.domains))
    for i, spec in enumerate(specs):
        place_reward_model(config, i, spec)
    return specs


def place_reward_model(config: Config, index: int, spec: RewardSpec) -> None:
    """A reward that runs a model (``reward_model``, a local ``llm_judge``) goes on the trainer's
    device and dtype; a forked worker cannot use CUDA, so ``isolation: process`` is refused there."""
    use_device = getattr(spec.fn, "use_device", None)
    if not callable(use_device):
        return
    from .. import distributed as dist
    from ..models import resolve_device, resolve_dtype

    device = dist.device_for_rank(resolve_device(config.trainer.device))
    use_device(device, resolve_dtype(config.model.dtype, device))
    if spec.isolation == "process" and spec.fn.device.type == "cuda":
        raise ConfigError(f"rewards[{index}].isolation = 'process': reward {spec.name!r} runs a model on "
                          f"{spec.fn.device}, and a forked worker process cannot use CUDA; use 'inline' (its "
                          "default) or 'thread'")
