"""What a run trains on and is scored by: the data records (train, held-out, per source), the
reward functions that score them (the demo's when no config names any), checked against each
other before any model loads.

``task_inputs`` is the one entry: :mod:`.setup` calls it for training (``check_inputs``) and for
``steadyrl eval`` (``build_eval``). Its checks, :func:`check_task`, import no torch: the command line
runs them before it loads torch (:mod:`steadyrl.run.preflight`), so a typo is answered in a moment.
"""

from __future__ import annotations

from ..config.schema import Config
from ..errors import ConfigError
from ..rewards import RewardSpec, load_reward
from ..sandbox import Limits
from .sources import by_domain, check_domains, load_all_data

__all__ = ["task_inputs", "check_task", "build_rewards", "check_reward_columns"]


def task_inputs(config: Config, *, for_eval: bool = False):
    """``(train, evals, scorer, (train_parts, eval_parts))``: train and held-out records, the
    scorer, and the records per source (``data.train_sources`` / ``eval_sources``, else None):
    every data and reward input checked (:func:`check_task`).

    Held-out prompts come from ``data.eval_path`` when it is set, else from the demo's split.
    """
    from ..rewards.scorer import Scorer

    demo = None
    if config.is_demo:  # the built-in task's records and reward
        from ..demo.builders import demo_task

        demo = demo_task(config)
    train, evals, specs, parts = check_task(config, for_eval=for_eval, demo=demo)
    environment = config.rollout.environment is not None
    return train, evals, Scorer(specs, allow_empty=environment, domain_key=config.data.domain_key), parts


def check_task(config: Config, *, for_eval: bool = False, demo=None, quiet: bool = False):
    """``(train, evals, reward specs, (train_parts, eval_parts))``, every data and reward input
    checked: files, columns, reward specs, domains. ``demo``: the built-in task's ``(train, evals,
    specs)``. Imports no torch unless a reward does (a reward model); ``quiet``: no console notes."""
    train, evals, train_parts, eval_parts = load_all_data(config, for_eval=for_eval, quiet=quiet,
                                                          demo=demo[:2] if demo else None)
    environment = config.rollout.environment is not None
    if config.rewards:
        specs = build_rewards(config, default=[])
    elif environment:  # the environment's rewards alone
        specs = []
    elif demo:
        specs = demo[2]
    else:  # built only when used: loading math_verify takes half a second
        specs = [RewardSpec(name="math", fn=load_reward("math"), weight=1.0, timeout_s=60.0)]
    names = [s.name for s in specs] + (["environment"] if environment else [])
    wanted = config.eval.accuracy_reward
    if wanted is not None and wanted not in names:
        raise ConfigError(f"eval.accuracy_reward = {wanted!r} is not one of the configured rewards {names}")
    provided = ("turns",) if config.rollout.multi_turn else ()  # an episode's turn list, given at scoring
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
