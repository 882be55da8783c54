"""``data.*``: where prompts come from (files, sources, generated environments), their columns and images.

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Any, Literal

from pydantic import field_validator

from .base import F, MAX_TOKENS, Section


GENERATED = ("reasoning_gym:", "textarena:")
"""Data paths whose rows an adapter generates (steadyrl.envs): a train split and a held-out test split."""


class SourceConfig(Section):
    """One file of a mixture (``data.train_sources``) or one held-out set (``data.eval_sources``)."""

    path: str = F(..., "The file or datasets.save_to_disk directory (formats as data.train_path).")
    name: str | None = F(None, "Name of this source in metrics (eval/<name>/accuracy, data/source/<name>/...); "
                         "null = the file name without its extension.")
    weight: float = F(1.0, "Sampling weight (train_sources): the share of drawn prompts from this source is "
                      "weight / sum of weights. Ignored by eval_sources.", gt=0)
    prompt_key: str | None = F(None, "Column holding the prompt; null = data.prompt_key.")
    answer_key: str | None = F(None, "Column holding the reference answer; null = data.answer_key.")
    domain: str | None = F(None, "Domain of every row of this source, written to the data.domain_key column "
                           "(which routes rewards); null = the rows' own data.domain_key column.")
    split: str | None = F(None, "Split of a DatasetDict directory; null = data.split.")
    format: Literal["jsonl", "json", "parquet", "csv", "tsv", "arrow"] | None = F(
        None, "File format; null = data.format, else inferred from the extension.")

    @property
    def key(self) -> str:
        """The name used in metrics: ``name``, else the file name without extension (a generated
        source's task or game)."""
        from pathlib import Path

        if self.name is None and self.path.startswith(GENERATED):  # reasoning_gym:chain_sum?size=9 -> chain_sum
            return self.path.split(":", 1)[1].split("?", 1)[0]
        return self.name if self.name is not None else Path(self.path).stem

    @field_validator("name", "domain")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "/" in value):
            raise ValueError("it is part of metric names: give a non-empty name without '/'")
        return value


class DataConfig(Section):
    train_path: str | None = F(None, "Training prompts: JSONL, JSON, Parquet, CSV or a "
                               "datasets.save_to_disk directory. null = the built-in demo task "
                               "(unless train_sources is set).")
    train_sources: list[SourceConfig] | None = F(
        None, "Several training files mixed by weight, each with its own columns and domain "
        "(docs/data.md); instead of train_path (set one of the two).")
    eval_path: str | None = F(None, "Held-out prompts for evaluation (same formats); null = no eval "
                              "(the demo has its own held-out split).")
    eval_sources: list[SourceConfig] | None = F(
        None, "Several held-out sets, each evaluated and logged on its own (eval/<name>/accuracy) and "
        "together (eval/accuracy); instead of eval_path.")
    domain_key: str | None = F(None, "Column naming each row's reward domain (e.g. 'domain'): rewards with "
                               "'domains' score only those rows, metrics are also given per domain "
                               "(docs/rewards.md). null = no domains: every reward scores every row.")
    format: Literal["jsonl", "json", "parquet", "csv", "tsv", "arrow"] | None = F(
        None, "File format; null = inferred from the extension.")
    split: str | None = F(None, "Split of a DatasetDict directory given as data.train_path; null = 'train'.")
    eval_split: str | None = F(None, "Split of a DatasetDict directory given as data.eval_path; null = "
                               "'test' when it has one, else 'validation' (never 'train').")
    prompt_key: str = F("prompt", "Column holding the prompt (a string or a list of chat messages).")
    answer_key: str = F("answer", "Column holding the reference answer, passed to reward functions.")
    extra_keys: list[str] | None = F(None, "Other columns passed to reward functions; null = all.")
    chat_template: bool | None = F(None, "Render prompts with the tokenizer's chat template. "
                                   "null = when the prompt is a list of messages.")
    chat_template_kwargs: dict[str, Any] = F({}, "Extra variables for the chat template, e.g. "
                                             "{enable_thinking: false} (Qwen3) or {date_string: ...}; used for "
                                             "prompts and for every multi-turn observation.")
    max_prompt_tokens: int = F(1024, "Prompts longer than this (in tokens) are dropped, with a count "
                               "in the log.", ge=1, le=MAX_TOKENS)
    image_column: str | None = F(None, "Column holding each row's images (docs/vision-data.md): a path (relative to "
                                 "the data file's folder), bytes, a datasets Image feature, or a list of these. "
                                 "null = 'images' or 'image' when the data has that column.")
    max_image_pixels: int = F(12_845_056, "Largest image accepted, in pixels (width x height, checked from the "
                              "header before decoding: a decompression bomb is refused). 12845056 = 3584 x 3584.",
                              ge=1, le=1_000_000_000)
    max_images_per_prompt: int = F(8, "Most images one prompt may hold.", ge=1, le=1024)
    bad_images: Literal["error", "skip"] = F("error", "A missing, corrupt or oversized image: error = stop at "
                                             "start-up naming the row, column and value; skip = drop the row, "
                                             "counted and reported once at start-up.")
    shuffle: bool = F(True, "Shuffle the prompts every epoch (seeded by trainer.seed).")
    max_eval_prompts: int | None = F(None, "Evaluate on at most this many held-out prompts.", ge=1)


def check_generated_splits(data: DataConfig) -> None:
    """Generated rows train on split train and are evaluated on split test, so that an accuracy is
    never measured on training rows (an eval source without a split would read train)."""
    def split(s):
        return s.split if s.split is not None else data.split
    checks = [("data.train_path", data.train_path, data.split, "train", "data.split"),
              ("data.eval_path", data.eval_path, data.eval_split or "test", "test", "data.eval_split")]
    checks += [(f"data.train_sources[{i}]", s.path, split(s), "train", f"data.train_sources[{i}].split")
               for i, s in enumerate(data.train_sources or ())]
    checks += [(f"data.eval_sources[{i}]", s.path, split(s), "test", f"data.eval_sources[{i}].split")
               for i, s in enumerate(data.eval_sources or ())]
    for where, path, got, want, key in checks:
        if path is not None and path.startswith(GENERATED) and (got or "train") != want:
            raise ValueError(f"{where} = {path!r} generates rows with a train and a held-out (test) split; "
                             f"{key} = {got!r} would read the {'training' if want == 'test' else 'held-out'} "
                             f"rows: set {key}: {want}")
