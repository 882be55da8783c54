"""Several data sources and reward domains: loading ``data.train_sources`` / ``data.eval_sources``,
the start-up checks of ``data.domain_key`` against the rewards, and the training sampler.

* A source is one file read with its own ``prompt_key`` / ``answer_key`` / ``split`` / ``format``
  (the ``data.*`` ones when null); its ``domain``, when set, is written into every row's
  ``data.domain_key`` column.
* :func:`check_domains`: every domain the data holds has at least one reward (a row no reward
  applies to would never be scored), and every domain a reward names occurs in the data (a
  misspelt domain would silently switch the reward off) - both :class:`ConfigError` (exit 2).
* :func:`make_sampler`: a :class:`~steadyrl.data.PromptSampler` over one file, a
  :class:`~steadyrl.data.MixtureSampler` over several.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..config.schema import Config, SourceConfig
from ..data import EVAL_SPLITS, MixtureSampler, PromptSampler, eval_split_of, load_records
from ..errors import ConfigError, DataError
from ..rewards import RewardSpec
from ..data.prompts import PromptFormat, prepare_prompts


@dataclass
class Part:
    """The records of one source: ``name`` in metrics, ``weight`` in the training mixture."""

    name: str
    records: list
    weight: float = 1.0
    folder: str | None = None  # where the source's relative image paths start (data.image_column)


def extra_keys(config: Config) -> list[str] | None:
    data = config.data
    if data.extra_keys is None:
        return None
    always = [k for k in (data.domain_key, data.image_column) if k is not None and k not in data.extra_keys]
    return [*data.extra_keys, *always]  # the domain and image columns always reach the prompts and the scorer


def load_source(config: Config, source: SourceConfig, where: str) -> list[dict]:
    """The records of one source, with its domain written into ``data.domain_key``."""
    data = config.data
    extra = extra_keys(config)
    if source.domain is not None and extra is not None:
        extra = [k for k in extra if k != data.domain_key]  # written below, need not be in the file
    try:
        records = load_records(source.path, format=source.format or data.format,
                               prompt_key=source.prompt_key or data.prompt_key,
                               answer_key=source.answer_key or data.answer_key, extra_keys=extra,
                               split=source.split if source.split is not None else data.split)
    except DataError as err:
        raise DataError(f"{where} ({source.key!r}): {err}") from None
    if source.domain is not None:
        records = [{**r, data.domain_key: source.domain} for r in records]
    return records


def load_parts(config: Config, key: str) -> list[Part] | None:
    """``data.<key>`` (train_sources / eval_sources) loaded, or None when it is not set."""
    sources = getattr(config.data, key)
    if sources is None:
        return None
    return [Part(s.key, load_source(config, s, f"data.{key}[{i}]"), s.weight, data_folder(s.path))
            for i, s in enumerate(sources)]


def data_folder(path: str | None) -> str | None:
    """The folder a data path's relative image paths start from: a file's folder, a
    ``save_to_disk`` folder itself; None for no path or a generated source (the working directory)."""
    from ..config.schema import GENERATED

    if not path or path.startswith(GENERATED):
        return None
    full = Path(path).expanduser()
    return str(full if full.is_dir() else full.parent)


def load_data(config: Config, *, eval_only: bool = False, quiet: bool = False) -> tuple[list[dict], list[dict]]:
    """``data.train_path`` (unless ``eval_only``) and ``data.eval_path`` records."""
    data = config.data
    kwargs = {"format": data.format, "prompt_key": data.prompt_key, "answer_key": data.answer_key,
              "extra_keys": extra_keys(config)}
    train = [] if eval_only else load_records(data.train_path, split=data.split, **kwargs)
    evals = load_eval_records(config, quiet=quiet) if data.eval_path else []
    if data.max_eval_prompts:
        evals = evals[: data.max_eval_prompts]
    return train, evals


def load_eval_records(config: Config, *, quiet: bool = False) -> list[dict]:
    """The records of ``data.eval_path``; from a DatasetDict folder, the split
    :func:`~steadyrl.data.eval_split_of` picks (``data.eval_split``, else test, else validation),
    named on the console."""
    data = config.data
    split = eval_split_of(data.eval_path, data.eval_split)
    records = load_records(data.eval_path, format=data.format, prompt_key=data.prompt_key,
                           answer_key=data.answer_key, extra_keys=extra_keys(config), split=split)
    if split is not None and not quiet and _is_main():
        how = "data.eval_split" if data.eval_split else f"the first of {' / '.join(EVAL_SPLITS)} it has"
        print(f"data: held-out prompts from split {split!r} of data.eval_path = {data.eval_path!r} ({how})",
              flush=True)
    return records


def _is_main() -> bool:
    from .. import distributed as dist  # torch: not for the checks made before it is imported

    return dist.is_main()


def load_all_data(config: Config, *, for_eval: bool = False, demo: tuple[list, list] | None = None,
                  quiet: bool = False):
    """``(train, evals, train_parts, eval_parts)``: all records, and the records per source when
    ``data.train_sources`` / ``data.eval_sources`` are set (else None; ``data.max_eval_prompts``
    applies to each held-out set). ``demo``: the built-in demo's (train, held-out) records."""
    data = config.data
    train_parts = None if for_eval else load_parts(config, "train_sources")
    eval_parts = load_parts(config, "eval_sources")
    if demo is not None:
        train, evals = demo
        if data.eval_path:
            evals = load_eval_records(config, quiet=quiet)
    else:
        train, evals = load_data(config, eval_only=for_eval or train_parts is not None, quiet=quiet)
        if train_parts is not None:
            train = [r for p in train_parts for r in p.records]
    if eval_parts is not None:
        limit = data.max_eval_prompts
        eval_parts = [Part(p.name, p.records[:limit] if limit else p.records, p.weight, p.folder) for p in eval_parts]
        evals = [r for p in eval_parts for r in p.records]
    return train, evals, train_parts, eval_parts


def tokenize_parts(parts: list[Part], key: str, tokenizer, options: PromptFormat) -> tuple[list[Part], int]:
    """Each source's records rendered and tokenized on its own (:func:`prepare_prompts`); returns
    the parts holding :class:`~steadyrl.data.prompts.PromptItem` s and the prompts dropped."""
    out, dropped = [], 0
    for part in parts:
        images = options.images
        part_options = options if images is None else replace(options, images=images.for_folder(part.folder))
        items, n = prepare_prompts(part.records, tokenizer, part_options, source=f"{key} {part.name!r}")
        out.append(Part(part.name, items, part.weight, part.folder))
        dropped += n
    return out, dropped


def _row_domain(record: dict, key: str):
    value = record.get(key)
    return None if value is None else str(value)


def by_domain(records: list[dict], key: str | None) -> dict[str | None, list[dict]]:
    """``records`` grouped by their domain (all under None when there is no ``key``)."""
    if key is None:
        return {None: records}
    groups: dict[str | None, list[dict]] = {}
    for record in records:
        groups.setdefault(_row_domain(record, key), []).append(record)
    return groups


def check_domains(config: Config, specs: list[RewardSpec], parts: list[tuple[str, list[dict]]], *,
                  all_data: bool = True) -> None:
    """Rewards against the domains of the rows in ``parts`` (``(where, records)`` pairs); with
    ``all_data`` false (``steadyrl eval``: held-out data only) a reward's domain may be absent."""
    key = config.data.domain_key
    if key is None or not specs:
        return
    seen: dict[str | None, str] = {}
    for where, records in parts:
        for record in records:
            seen.setdefault(_row_domain(record, key), where)
    for domain, where in seen.items():
        if not any(s.domains is None or domain in s.domains for s in specs):
            listed = {s.name: list(s.domains) for s in specs if s.domains is not None}
            what = f"have no {key!r} column (or a null one)" if domain is None else f"have {key} = {domain!r}"
            raise ConfigError(f"rewards: rows of {where} {what}, but no reward applies to them (rewards[].domains: "
                              f"{listed}); add the domain to a reward's domains, or a reward with domains: null")
    if not all_data:
        return
    for i, spec in enumerate(specs):
        missing = [d for d in spec.domains or () if d not in seen]
        if missing:
            present = sorted(str(d) for d in seen)
            raise ConfigError(f"rewards[{i}].domains = {list(spec.domains)}: no row of the data has "
                              f"{key} = {missing[0]!r} (domains in the data: {present}); a misspelt domain would "
                              "leave this reward unused")


def make_sampler(config: Config, prompts: list, parts: list[Part] | None):
    """The training sampler: one file, or the weighted mixture of ``parts`` (tokenized prompts)."""
    batch, seed, shuffle = config.rollout.prompts_per_step, config.trainer.seed, config.data.shuffle
    if parts is None:
        return PromptSampler(prompts, batch, seed=seed, shuffle=shuffle)
    return MixtureSampler([p.records for p in parts], [p.weight for p in parts], batch, seed=seed,
                          shuffle=shuffle, names=[p.name for p in parts])
