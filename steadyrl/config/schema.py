"""The typed configuration of a steadyrl run: every hyperparameter, its default and its help text.

Validated by pydantic when loaded, before any model is loaded. Defaults follow the seed notes
(``shared/seeds/``): clip 0.2, dual-clip constant ``1 + 2 * clip``, GAE lambda 0.95, gamma 1.0,
max_grad_norm 1.0, ppo_epochs 1, difficulty mask (0.1, 0.95). Algorithm presets
(:mod:`steadyrl.config.presets`) fill the ``algorithm`` section's unset keys explicitly.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ..functional.constants import (
    DIFFICULTY_HIGH,
    DIFFICULTY_LOW,
    GAE_LAMBDA,
    GAMMA,
    CLIP_COV_LB,
    CLIP_COV_RATIO,
    CLIP_COV_UB,
    KL_COV_COEF,
    KL_COV_RATIO,
    LOGPROB_DIFF_CLAMP,
    MAX_GRAD_NORM,
    OVERLONG_PENALTY_FACTOR,
    PG_CLIP,
    SAPO_TAU_NEG,
    SAPO_TAU_POS,
    SEQ_LOG_RATIO_CLAMP,
    TIS_LOG_RATIO_CLAMP,
    dual_clip_default,
)
from ..reward_specs import reward_name, url_option_problems
from .compat import check_config

NormType = Literal["batch", "group", "running", "none"]
GROUPED_BY_ESTIMATOR = {"grpo": True, "gae": False, "rloo": True, "reinforce_plus_plus": False,
                        "reinforce_plus_plus_baseline": True, "opo": True, "grpo_passk": True,
                        "token_reward": False}
"""The config's torch-free view of :data:`steadyrl.functional.ADVANTAGE_ESTIMATORS`: each
estimator's name (the choices of ``algorithm.advantage_estimator``) and whether it compares a
prompt's responses with each other (``grouped`` at its registration). Loading a config must not
import torch, which the registry does; a test keeps the two equal."""
AdvantageName = Literal[tuple(GROUPED_BY_ESTIMATOR)]
PolicyLossName = Literal["ppo", "gspo", "cispo", "vanilla_pg", "sapo", "kl_cov", "clip_cov"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3", "abs"]
PresetName = Literal["grpo", "dr_grpo", "ppo", "rloo", "reinforce_plus_plus", "gspo", "cispo"]


ASYNC_TIS_CAP = 2.0
"""``rollout.tis_cap`` when unset with asynchronous rollouts (stale batches); null otherwise."""

MAX_TOKENS = 2**24
"""Most tokens a length setting may name (16,777,216: past any model's context): a typo such as
``max_new_tokens: 1000000000000`` is refused when the config is read, not by the OOM killer."""
MAX_SAMPLES = 2**20
"""Most samples, prompts or passes a batch setting may name (1,048,576; also prompts_per_step x
group_size)."""
MAX_WIDTH = 2**16
"""Most of a model size (LoRA rank, the demo model's layers, width and heads, the demo's string length)."""
MAX_MIB = 2**30
"""Most MiB (KiB for output_kib) of a worker limit: 1 PiB, as far as the kernel's limits go."""
MAX_SECONDS = 2**31 - 1
"""Most CPU seconds of a worker limit (what RLIMIT_CPU holds everywhere)."""
MAX_PROCESSES = 2**22
"""Most processes (the kernel's largest pid_max), and tool workers."""


def F(default: Any, help: str, **constraints: Any) -> Any:
    """A field with its help text (shown by ``steadyrl config show``)."""
    return Field(default, description=help, **constraints)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    return False


def _number_type(annotation: Any) -> type | None:
    """``int`` or ``float`` when a field holds a number (or null), else None."""
    if annotation in (int, float):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _number_type(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_number_type(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    return None


def _valid_numbers(annotation: Any, metadata: list) -> str:
    """What a number field accepts, in words: ``an integer >= 1``, ``a number > 0 or null``."""
    if typing.get_origin(annotation) is Annotated:  # a tuple's item: its constraints live inside
        inner = typing.get_args(annotation)[1:]
        metadata = [m for info in inner for m in getattr(info, "metadata", [info])]
    kind = "an integer" if _number_type(annotation) is int else "a number"
    bounds = [f"{op} {getattr(m, attr)}" for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
              for m in metadata if hasattr(m, attr)]
    text = f"{kind} {' and '.join(bounds)}" if bounds else kind
    return text + (" or null" if type(None) in typing.get_args(annotation) else "")


def _boolean_for_number(annotation: Any, metadata: list, value: Any) -> str | None:
    """Why ``value`` is refused when it is a boolean where a number belongs (pydantic would read
    ``true`` as 1), else None. Looks inside tuples (``optim.betas``)."""
    if isinstance(value, bool) and _number_type(annotation) is not None:
        return f"a boolean is not a number; valid: {_valid_numbers(annotation, metadata)}"
    if typing.get_origin(annotation) is tuple and isinstance(value, (list, tuple)):
        for item_annotation, item in zip(typing.get_args(annotation), value):
            problem = _boolean_for_number(item_annotation, [], item)
            if problem:
                return problem
    return None


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 and false as 0 in a number field: rollout.group_size=true would
        # quietly be 1.
        field = cls.model_fields[info.field_name]
        problem = _boolean_for_number(field.annotation, field.metadata, value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_nan(cls, value: Any) -> Any:
        # NaN passes every unconstrained float field (a reward weight of .nan silently makes every
        # score NaN); infinity stays allowed (max_grad_norm: .inf turns clipping off).
        if _has_nan(value):
            raise ValueError("NaN is not a valid value")
        return value


Beta = Annotated[float, Field(ge=0, lt=1)]


class LoraConfig(Section):
    enabled: bool = F(False, "Train LoRA adapters (PEFT) instead of all weights; the reference "
                      "policy is the base model with the adapter disabled (no second copy).")
    r: int = F(16, "LoRA rank.", ge=1, le=MAX_WIDTH)
    alpha: float = F(32.0, "LoRA alpha (scaling = alpha / r).", gt=0)
    dropout: float = F(0.0, "LoRA dropout.", ge=0, lt=1)
    target_modules: str | list[str] = F("all-linear", "Modules to adapt: 'all-linear' or a list of names.")


class ModelConfig(Section):
    name_or_path: str | None = F(None, "Policy model: a hub name or a local directory "
                                 "(AutoModelForCausalLM). null = the built-in demo model.")
    gguf_file: str | None = F(None, "A GGUF file (llama.cpp's format, often quantised) to train from: "
                              "de-quantised once into a cached model directory (as steadyrl convert "
                              "writes) that the run loads; with name_or_path, a file name in that local "
                              "directory. null = none.")
    tokenizer: str | None = F(None, "Tokenizer hub name or directory; null = the model's.")
    revision: str | None = F(None, "Hub revision (branch, tag or commit) of the model.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F(
        "auto", "Trained weights dtype (docs/precision.md). auto = float32 weights and optimizer state, "
        "computed in bfloat16 (autocast) on a CUDA GPU that supports it, float32 throughout elsewhere. "
        "bfloat16 / float16 store the weights in that dtype, updated as model.bf16_update says.")
    bf16_update: Literal["kahan", "stochastic_rounding", "master", "plain"] = F(
        "kahan", "How AdamW writes its update into bfloat16/float16 weights (model.dtype bfloat16 or "
        "float16; ignored otherwise): kahan = a compensation buffer keeps what rounding drops (2 more "
        "bytes/param), stochastic_rounding = rounds up or down at random (right on average, no buffer), "
        "master = a float32 master copy in the optimizer (4 more bytes/param), plain = torch's AdamW, "
        "which loses every update below half the weight's spacing (refused when optim.lr < 6.1e-5).")
    trust_remote_code: bool = F(False, "Allow custom modelling code from the hub.")
    attn_implementation: str | None = F(None, "Attention kernel (e.g. sdpa, flash_attention_2); "
                                        "null = transformers' default.")
    gradient_checkpointing: bool = F(False, "Recompute activations in the backward pass to save memory.")
    freeze_vision: bool = F(True, "Vision-language models (docs/vision-data.md): keep the vision tower and its "
                            "projector frozen (requires_grad false; only the language model trains). false = "
                            "train them too. Ignored for text models.")
    critic_name_or_path: str | None = F(None, "Critic backbone for GAE (PPO); null = the policy's.")
    lora: LoraConfig = Field(default_factory=LoraConfig)


class TeacherConfig(Section):
    """On-policy distillation (docs/distillation.md): a frozen teacher scores the student's sampled tokens."""

    name_or_path: str | None = F(None, "Teacher model for on-policy distillation: a hub name or a local directory "
                                 "(AutoModelForCausalLM), loaded like the reference; it must share the policy's "
                                 "tokenizer (same vocabulary). null = no distillation.")
    revision: str | None = F(None, "Hub revision (branch, tag or commit) of the teacher.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F(
        "auto", "Teacher weights dtype (inference only). auto = bfloat16 on a CUDA GPU that supports it, else float32.")
    device: str | None = F(None, "Device of the teacher's forward (e.g. cuda:1); null = the trainer's device.")
    trust_remote_code: bool = F(False, "Allow the teacher's custom modelling code from the hub.")
    distill_coef: float = F(1.0, "Weight of the per-token distillation reward -coef * (log pi_student - "
                            "log pi_teacher) of each sampled policy token.", ge=0)
    task_rewards: bool = F(True, "Train on the task's rewards too (mixed distillation). false = pure "
                           "distillation: the rewards are still scored and logged (and eval accuracy "
                           "reported) but only the teacher's signal enters the advantage.")


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


class RewardLimitsConfig(Section):
    """Resource limits of the worker process (isolation: process; see steadyrl.sandbox); null turns one off."""

    memory_mb: int | None = F(4096, "Address space (MiB) the worker may add to what it holds when it starts "
                              "(RLIMIT_AS = its virtual size at fork, which includes the trainer's model "
                              "mappings, + this); past it the function gets MemoryError.", ge=1, le=MAX_MIB)
    cpu_s: int | None = F(600, "CPU seconds one batch may use in the worker (RLIMIT_CPU, re-armed per batch); "
                          "past it the worker is killed (SIGXCPU). Processes it starts inherit the limit.",
                          ge=1, le=MAX_SECONDS)
    processes: int | None = F(64, "Processes the function may have at once, the worker included; more and the "
                              "worker and all of them are killed. Also sets RLIMIT_NPROC to the user's current "
                              "process count + this (the kernel ignores RLIMIT_NPROC for root: then only the "
                              "worker's own count, every 0.1 s, applies).", ge=1, le=MAX_PROCESSES)
    file_size_mb: int | None = F(1024, "Largest file (MiB) the function may write (RLIMIT_FSIZE).", ge=1, le=MAX_MIB)
    output_kib: int = F(64, "The worker's stdout/stderr are captured, not printed: the last this many KiB "
                        "are kept and quoted in failure messages.", ge=1, le=MAX_MIB)


class RewardConfig(Section):
    name: str = F(..., "A built-in reward (math, exact_match, normalized_match, regex_format, "
                  "length_penalty; code; reward_model, llm_judge, http: docs/rewards.md) or a user function "
                  "'module:function' / 'path/file.py:function'.")
    label: str | None = F(None, "Name under which this reward is logged (reward/<label>) and weighted, "
                          "and which eval.accuracy_reward names; default: name (the function's name for "
                          "'module:function'). Tells apart two rewards with the same name.")
    weight: float = F(1.0, "Weight of this reward in the combined score.")
    domains: list[str] | None = F(None, "Score only rows whose data.domain_key column is one of these "
                                  "domains (the reward is not called on the others); null = every row.")
    options: dict[str, Any] = F({}, "Keyword options: passed to a built-in reward's factory, or bound to a "
                                "user function as keyword arguments. {env: NAME} is the environment "
                                "variable NAME's value; secret-looking options (api_key, *_token, ...) are "
                                "written out as <redacted> (docs/rewards.md).")
    timeout_s: float = F(60.0, "Time limit of scoring one batch with this reward (all its calls); at the "
                         "limit the samples not yet scored are invalid (failure kind timeout), those "
                         "scored keep their scores.", gt=0)
    isolation: Literal["process", "thread", "inline"] | None = F(
        None, "Where the function runs: process (a contained worker process, killed with all it started "
        "on time-out; default on Linux), thread (a time-out abandons the call, but a thread cannot be "
        "stopped: C code such as sympy's runs on to its end, holding a core; default of llm_judge and "
        "http; code runs in a process too, which starts its programs), inline (no time limit; default of reward_model and a local llm_judge, which run on the "
        "trainer's device).")
    chunk_size: int | None = F(1, "Samples per call of the function: 1 scores sample by sample, so a time-out "
                               "or crash fails only the samples not yet scored; null = the whole batch in "
                               "one call (for a function whose scores depend on the whole batch, or that "
                               "batches a model: reward_model, llm_judge, http and code use null unless set).", ge=1)
    env_passthrough: list[str] = F([], "Environment variables (names or fnmatch patterns) kept in the worker "
                                   "although they look like credentials (*TOKEN*, *KEY*, *SECRET*, "
                                   "*PASSWORD*, *CREDENTIAL*, AWS_*, ...), which are removed by default.")
    limits: RewardLimitsConfig = Field(default_factory=RewardLimitsConfig,
                                       description=RewardLimitsConfig.__doc__)

    @field_validator("label")
    @classmethod
    def _check_label(cls, label: str | None) -> str | None:
        if label is not None and (not label.strip() or "/" in label):
            raise ValueError("a label is part of the metric name reward/<label>: give a non-empty name without '/'")
        return label

    @field_validator("domains")
    @classmethod
    def _check_domains(cls, domains: list[str] | None) -> list[str] | None:
        if domains is not None and (not domains or not all(d.strip() and "/" not in d for d in domains)):
            raise ValueError("give a non-empty list of domain names (without '/'), or null for every row")
        return domains

    @property
    def key(self) -> str:
        """The name this reward is logged (``reward/<key>``), weighted and chosen by: the label, or the
        short name of ``name`` (:func:`steadyrl.rewards.reward_name`)."""
        return self.label if self.label is not None else reward_name(self.name)


class VLLMConfig(Section):
    gpu_memory_utilization: float = F(0.4, "Fraction of GPU memory vLLM may take.", gt=0, le=1)
    sleep_mode: bool = F(True, "Put vLLM to sleep (KV cache freed, weights offloaded to CPU memory) "
                         "while the trainer runs, and wake it to generate.")


class AsynchronousConfig(Section):
    """Asynchronous rollouts (docs/scaling.md); spelled out because ``async`` is a Python keyword."""

    max_staleness: int | None = F(None, "Asynchronous rollouts (docs/scaling.md): a worker process with its "
                                  "own copy of the policy generates the next batches while the current one "
                                  "trains; a batch is at most this many policy versions (training steps) "
                                  "old. 0 = generated by the worker from the current weights (the same run "
                                  "as without it); null = off (generation in the trainer).", ge=0)


CorrectionMode = Literal["truncate", "mask", "reject", "truncate+mask", "geometric", "geometric+truncate"]
CORRECTION_BOUNDS = {"mask": (0.5, 5.0), "geometric": (0.99, 1.01)}
"""Default ``[low, high]`` of ``rollout.correction`` per masking mode (filled in the resolved config):
IcePop's token bounds for mask, tight bounds around 1 for the length-normalised geometric ratio."""


class CorrectionConfig(Section):
    """Training-inference mismatch correction (docs/stability.md): vLLM, asynchronous or rollout.dtype runs."""

    mode: CorrectionMode | None = F(
        None, "How tokens are re-weighted or dropped by w = pi_train / pi_rollout (w at rollout.correction."
        "level): truncate (TIS: weight min(w, cap)), mask (MIS / IcePop: drop tokens or sequences whose w "
        "leaves [low, high], weight the others by w), reject (verl's rollout_rs: the drops of mask, the others "
        "at weight 1), truncate+mask (drop outside [low, high], weight min(w, cap)), geometric (drop a whole "
        "sequence whose exp(mean_t log w_t) leaves [low, high], the others at weight 1), geometric+truncate "
        "(that, and weight min(w, cap): each token's w at level token, its sequence's product at level "
        "sequence). null = rollout.tis_cap's token truncation, or none.")
    level: Literal["token", "sequence"] = F(
        "token", "What w is for truncate, mask and reject (and geometric+truncate's weight): each token's "
        "ratio, or its sequence's (the product over its policy tokens, given to every token). geometric's "
        "drop always tests the sequence's geometric mean.")
    cap: float = F(2.0, "Cap of the truncated weight (truncate modes).", gt=0)
    low: float | None = F(None, "Lower bound of the kept ratio (mask, reject and geometric modes). Unset: "
                          f"{CORRECTION_BOUNDS['mask'][0]} for mask and reject, {CORRECTION_BOUNDS['geometric'][0]} "
                          "for geometric.", gt=0)
    high: float | None = F(None, "Upper bound of the kept ratio (mask, reject and geometric modes). Unset: "
                           f"{CORRECTION_BOUNDS['mask'][1]} for mask and reject, {CORRECTION_BOUNDS['geometric'][1]} "
                           "for geometric.", gt=0)
    bypass: bool = F(False, "Use the engine's log-probs as old_logprobs: no recompute pass before the "
                     "update (the PPO ratio is then pi_theta / pi_rollout, its clip bounds the gap; nothing "
                     "is left for mode or rollout.tis_cap to correct, and the mismatch/ metrics are not logged).")

    @model_validator(mode="before")
    @classmethod
    def _default_bounds(cls, data: Any) -> Any:
        # the bounds in force depend on the mode; filled here so the resolved config shows them
        if isinstance(data, dict) and isinstance(data.get("mode"), str):
            kind = "geometric" if data["mode"].startswith("geometric") else "mask"
            if data["mode"] != "truncate":
                low, high = CORRECTION_BOUNDS[kind]
                data = {"low": low, "high": high, **{k: v for k, v in data.items() if v is not None}}
        return data

    @model_validator(mode="after")
    def _check_bounds(self) -> "CorrectionConfig":
        if self.mode is None:
            return self
        geometric = self.mode.startswith("geometric")
        limit = TIS_LOG_RATIO_CLAMP if self.level == "token" else SEQ_LOG_RATIO_CLAMP
        if "truncate" in self.mode and self.cap > math.exp(limit):
            raise ValueError(f"rollout.correction.cap = {self.cap} is above what a {self.level} ratio can reach "
                             f"(exp({limit:g}) = {math.exp(limit):.6g}); valid: 0 < cap <= {math.exp(limit):.6g}")
        if self.mode != "truncate":
            bound = math.exp(LOGPROB_DIFF_CLAMP if geometric else limit)
            if not (self.low < self.high):
                raise ValueError(f"rollout.correction.low = {self.low} must be below rollout.correction.high = "
                                 f"{self.high} (the kept ratios are [low, high])")
            if self.low < 1 / bound or self.high > bound:
                raise ValueError(f"rollout.correction.low = {self.low}, high = {self.high}: valid bounds are in "
                                 f"[{1 / bound:.6g}, {bound:.6g}] for mode {self.mode!r} at level {self.level!r}")
        return self

    def modes(self, tis_cap: float | None) -> tuple[str, dict[str, dict]] | None:
        """``(level, {mode: params})`` for :func:`steadyrl.functional.correct_mismatch`, or None:
        ``mode``, else ``rollout.tis_cap`` as token truncation, else no correction."""
        if self.mode is None:
            return ("token", {"truncate": {"cap": tis_cap}}) if tis_cap is not None and not self.bypass else None
        out: dict[str, dict] = {}
        if "truncate" in self.mode:
            out["truncate"] = {"cap": self.cap}
        if self.mode.startswith("geometric"):
            out["geo_mask"] = {"low": self.low, "high": self.high}
        elif self.mode == "reject":
            out["reject"] = {"low": self.low, "high": self.high}
        elif "mask" in self.mode:
            out["mask"] = {"low": self.low, "high": self.high}
        return self.level, out


class RolloutConfig(Section):
    engine: Literal["hf", "vllm"] = F("hf", "Generation engine: hf (transformers generate, CPU or "
                                      "GPU) or vllm (GPU, optional extra).")
    prompts_per_step: int = F(8, "Prompts sampled per training step.", ge=1, le=MAX_SAMPLES)
    group_size: int = F(8, "Responses generated per prompt (the GRPO group).", ge=1, le=MAX_SAMPLES)
    max_new_tokens: int = F(512, "Longest response; a response that reaches it without EOS is "
                            "'truncated'.", ge=1, le=MAX_TOKENS)
    temperature: float = F(1.0, "Sampling temperature (log-probs are recomputed with the same). Only "
                              "rollout.temperature/top_p/top_k shape the sampling: the model's "
                              "generation_config.json (top-k, repetition penalty, ...) is ignored.", gt=0)
    top_p: float = F(1.0, "Nucleus sampling threshold.", gt=0, le=1)
    top_k: int = F(0, "Top-k sampling; 0 = off.", ge=0)
    generation_batch_size: int | None = F(None, "Prompts per generate call; null = all at once.", ge=1, le=MAX_SAMPLES)
    hf_cache: Literal["dynamic", "static"] = F(
        "dynamic", "KV cache of the hf engine: dynamic (transformers' default) or static (preallocated; "
        "on CUDA transformers compiles the decoding step for it). Same token ids (tested on the CPU); "
        "static skips prompt-prefix sharing in generation. Its GPU speed is not measured yet.")
    tis_cap: float | None = F(None, "Truncated importance sampling, where the engine's own log-probs "
                              "come back (rollout.engine=vllm, or asynchronous rollouts): weight each "
                              "token by exp(clamp(logp_train - logp_behaviour, -10, 10)) capped at this "
                              "value; null = off (only the mismatch metrics). Unset: "
                              f"{ASYNC_TIS_CAP} with asynchronous rollouts (stale batches), else null.", gt=0)
    dtype: Literal["float32", "bfloat16", "float16"] | None = F(
        None, "Precision the engine samples in and reports its log-probs from, when it differs from "
        "the trainer's (model.dtype): the HF engine then generates with a copy of the policy in this "
        "dtype, refreshed from the trainer's weights after every update (one more copy of the weights "
        "in memory, one weight copy per step, a forward pass for the engine's log-probs and the trainer's "
        "old_logprobs pass that a one-epoch run otherwise skips), and returns the sampled "
        "tokens' log-probs in it (rollout log-probs: mismatch metrics and rollout.correction apply); "
        "the asynchronous worker and vLLM load the policy in it. null = the trainer's dtype, no copy. "
        "float16 needs a GPU.")
    correction: CorrectionConfig = Field(default_factory=CorrectionConfig,
                                         description="Training-inference mismatch correction (docs/stability.md).")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    asynchronous: AsynchronousConfig = Field(default_factory=AsynchronousConfig)
    # --- multi-turn episodes (docs/agents.md); with neither tools nor an environment an episode
    # is one turn and nothing below applies.
    tools: list[str] = F([], "Tool functions the policy may call (file.py:fn or package.module:fn), with "
                         "type hints and a docstring; their JSON schemas go to the chat template's tools=.")
    tool_parser: str = F("hermes", "How tool calls are read from a turn: hermes (<tool_call>{json}</tool_call>, "
                         "Qwen2.5/Qwen3/Hermes), llama3_json (Llama-3.1 JSON calls), qwen3_coder, mistral, "
                         "glm45, kimi_k2, harmony, deepseek, pythonic, command_r, auto (the format a turn is "
                         "written in) or a file.py:fn.")
    environment: str | None = F(None, "An environment class (file.py:Class): one instance per episode, "
                                "reset(**row) -> first observation or None, step(text) -> "
                                "(observation, reward, done).")
    agent: str | None = F(None, "An agent function (file.py:run_episode) that runs each episode against the "
                          "OpenAI-compatible gateway serving the policy (docs/environments.md): (row, client) or "
                          "(row, base_url, api_key) -> reward or None (None: the reward functions score it).")
    agent_concurrency: int = F(256, "Episodes of rollout.agent that run at once; the calls of all running "
                               "episodes are batched into one generate per wave.", ge=1, le=MAX_PROCESSES)
    agent_timeout_s: float = F(600.0, "Time limit of one rollout.agent episode; one that exceeds it (or raises) "
                               "is left out of the update and counted in rollout/agent/timeouts.", gt=0)
    observation_role: Literal["user", "tool"] = F("user", "Role of an environment's text observations in "
                                                  "the chat template (tool results are always 'tool').")
    multi_turn_mode: Literal["auto", "single", "stepwise", "as_sampled"] = F(
        "auto", "How an episode becomes training samples (docs/agents.md, Multi-turn modes): single (one "
        "sequence, exactly the chat template's rendering of the whole conversation; needs a template that "
        "only appends), stepwise (each turn a sample: the template's rendering of the history at that turn, "
        "as at inference, plus the sampled ids; samples of an episode share its reward), as_sampled (one "
        "sequence as the policy saw it while sampling, earlier turns never re-rendered), auto (single when "
        "the start-up probe finds the template append-only, else stepwise).")
    turn_reward: Literal["sum", "last"] = F("sum", "How an environment's per-turn rewards combine into the "
                                           "episode's, which is added to the reward functions' score.")
    max_turns: int = F(8, "Most policy turns in an episode; an episode still calling tools then is "
                       "truncated.", ge=1, le=MAX_TOKENS)
    max_observation_tokens: int = F(512, "Longest observation (tool result or environment message) in "
                                    "tokens, the chat template's own tokens included; longer ones have "
                                    "their contents shortened (the template's tokens are never cut, so "
                                    "start-up refuses a limit not above what the template needs for one "
                                    "empty observation).", ge=1, le=MAX_TOKENS)
    observation_truncation: Literal["right", "left"] = F("right", "Which end of a long observation is cut: "
                                                         "right keeps its start, left keeps its end.")
    max_episode_tokens: int | None = F(None, "Most tokens after the prompt (turns and observations); an "
                                       "episode that reaches it is truncated (so algorithm.mask_truncated "
                                       "applies). null = max_turns * max_new_tokens + (max_turns - 1) * "
                                       "max_observation_tokens.", ge=1, le=MAX_TOKENS)
    tool_timeout_s: float = F(30.0, "Time limit of one tool or environment call; a tool that exceeds it "
                              "returns an error to the model, an environment that does fails the episode.", gt=0)
    max_tool_calls_per_turn: int | None = F(8, "Most tool calls of one turn that are run (verl's "
                                            "multi_turn.max_parallel_calls); each further call is answered "
                                            "with an error the model reads, counted in "
                                            "rollout/tool_errors/max_calls. null = no cap.", ge=1)
    tool_time_budget_s: float | None = F(60.0, "Time budget of all the tool calls of one turn, counted from "
                                         "when they are sent: a call still running when it is spent is cut, "
                                         "one not started is not run; both answer with an error, counted in "
                                         "rollout/tool_errors/time_budget. null = each call only under "
                                         "rollout.tool_timeout_s.", gt=0)
    tool_isolation: Literal["process", "thread", "inline"] | None = F(
        None, "Where tool and environment calls run, as rewards[].isolation: process (a contained sandbox "
        "worker, killed with all it started on time-out; default on Linux), thread (a time-out abandons "
        "the call; C code cannot be stopped), inline (no time limit, for debugging).")
    tool_workers: int = F(8, "Sandbox workers for tool calls (process isolation): up to this many calls run "
                          "at once. An environment gets a worker per running episode.", ge=1, le=MAX_PROCESSES)
    tool_limits: RewardLimitsConfig = Field(default_factory=RewardLimitsConfig,
                                            description="Resource limits of the tool and environment workers "
                                                        "(process isolation), as rewards[].limits.")

    @model_validator(mode="before")
    @classmethod
    def _async_tis_cap(cls, data: Any) -> Any:
        # rollout.tis_cap's default depends on asynchronous rollouts; filled here (the resolved and
        # the saved config show the cap in force, so a resumed run keeps it)
        # (not when rollout.correction says what to do instead)
        if isinstance(data, dict) and "tis_cap" not in data:
            asynchronous = data.get("asynchronous")
            staleness = (asynchronous.get("max_staleness") if isinstance(asynchronous, dict)
                         else getattr(asynchronous, "max_staleness", None))
            correction = data.get("correction")
            replaced = (correction.get("mode") is not None or correction.get("bypass") is True
                        if isinstance(correction, dict)
                        else getattr(correction, "mode", None) is not None or getattr(correction, "bypass", False))
            if staleness is not None and not replaced:
                data = {**data, "tis_cap": ASYNC_TIS_CAP}
        return data

    @model_validator(mode="after")
    def _check_correction(self) -> "RolloutConfig":
        c = self.correction
        if self.tis_cap is not None and (c.mode is not None or c.bypass):
            what = f"rollout.correction.mode = {c.mode!r}" if c.mode is not None else "rollout.correction.bypass"
            raise ValueError(f"rollout.tis_cap = {self.tis_cap} and {what} are both set: rollout.tis_cap is the "
                             "token-truncate case of rollout.correction (mode: truncate, cap: the same value); "
                             "set only one")
        if c.bypass and c.mode is not None:
            raise ValueError(f"rollout.correction.bypass = true with rollout.correction.mode = {c.mode!r}: with "
                             "bypass old_logprobs are the engine's, the ratio the mode reads is 1 and there is "
                             "nothing to correct; set rollout.correction.mode=null or bypass=false")
        returns_logprobs = (self.engine == "vllm" or self.asynchronous.max_staleness is not None
                            or self.dtype is not None)
        if (c.bypass or c.mode is not None) and not returns_logprobs:
            what = "rollout.correction.bypass = true" if c.bypass else f"rollout.correction.mode = {c.mode!r}"
            raise ValueError(f"{what} needs the engine's log-probs, which the hf engine returns only with "
                             "rollout.dtype set (or use rollout.engine=vllm, or asynchronous rollouts); without "
                             "them the engine is the trained model and there is no mismatch to correct")
        return self

    @property
    def multi_turn(self) -> bool:
        return bool(self.tools) or self.environment is not None or self.agent is not None

    @property
    def episode_token_limit(self) -> int:
        if self.max_episode_tokens is not None:
            return self.max_episode_tokens
        return self.max_turns * self.max_new_tokens + (self.max_turns - 1) * self.max_observation_tokens

    @model_validator(mode="after")
    def _check_turns(self) -> "RolloutConfig":
        if self.prompts_per_step * self.group_size > MAX_SAMPLES:
            raise ValueError(f"rollout.prompts_per_step x rollout.group_size = {self.prompts_per_step} x "
                             f"{self.group_size} = {self.prompts_per_step * self.group_size:,} samples per step; "
                             f"valid: at most {MAX_SAMPLES:,}")
        if self.tools and self.environment is not None:
            raise ValueError("rollout.tools and rollout.environment are both set: an episode is driven by "
                             "either tools or an environment; an environment can call functions itself")
        if self.agent is not None and (self.tools or self.environment is not None):
            raise ValueError(f"rollout.agent = {self.agent!r} cannot be combined with rollout.tools or "
                             "rollout.environment: the agent drives its episodes itself (it passes its tools to "
                             "the gateway with tools=); set rollout.tools=[] and rollout.environment=null")
        if self.multi_turn and self.episode_token_limit < 2:
            raise ValueError(f"rollout.max_episode_tokens = {self.max_episode_tokens} cannot fit one turn; "
                             "valid: at least 2 (and enough for a turn and an observation)")
        return self


class AlgorithmConfig(Section):
    preset: PresetName = F("grpo", "Named set of defaults for this section: grpo, dr_grpo, ppo, rloo, "
                           "reinforce_plus_plus, gspo, cispo. Keys you set yourself always win.")
    advantage_estimator: AdvantageName = F("grpo", "Advantage estimator (see steadyrl.functional.advantages).")
    norm_by_std: bool = F(True, "GRPO / pass@k: divide by the group std (false = Dr. GRPO).")
    group_stats: Literal["episode", "sample"] = F(
        "episode", "How a multi-turn episode trained as several samples (rollout.multi_turn_mode: stepwise, or "
        "a gateway agent's several trajectories) counts in its group's statistics (grpo's mean and std, rloo's "
        "and reinforce_plus_plus_baseline's baseline): episode = once (its reward is one outcome; as SkyRL and "
        "prime-rl), sample = once per turn sample (an episode of t turns t times: the default until this key "
        "existed). RLOO leaves the sample's whole episode out of its baseline either way. Runs with one sample "
        "per episode: no difference.")
    policy_loss: PolicyLossName = F("ppo", "Policy loss: ppo (clipped surrogate), gspo, cispo, vanilla_pg, "
                                    "sapo (soft sigmoid gate, sapo_tau_*), kl_cov / clip_cov (covariance-selected "
                                    "tokens, kl_cov_* / clip_cov_*; docs/algorithms.md).")
    loss_agg_mode: LossAggMode = F("token-mean", "How per-token losses become one scalar.")
    norm_length: int | None = F(None, "Constant length of seq-mean-token-sum-norm; null = "
                                "rollout.max_new_tokens, one turn's budget: in multi-turn runs set it (e.g. to "
                                "rollout.max_episode_tokens) for a constant per episode.", ge=1, le=MAX_TOKENS)
    pg_clip: float = F(PG_CLIP, "PPO clip range: the ratio is kept in [1 - clip, 1 + clip]; at most 1 "
                       "(a larger clip would make the lower bound negative).", ge=0, le=1)
    pg_clip_low: float | None = F(None, "Lower clip range (asymmetric), at most 1 (1 = no lower bound, as "
                                  "in the cispo preset); null = pg_clip.", ge=0, le=1)
    pg_clip_high: float | None = F(None, "Upper clip range (clip-higher); null = pg_clip.", ge=0)
    dual_clip: bool = F(False, "Dual clip for negative advantages: loss bounded by -c * A.")
    dual_clip_c: float | None = F(None, "Dual-clip constant c; null = 1 + 2 * pg_clip (ROLL's PPO defaults).", gt=1)
    sapo_tau_pos: float = F(SAPO_TAU_POS, "SAPO gate temperature where the advantage is positive "
                            "(arXiv 2511.20347): larger = a steeper gate, off-policy tokens fade sooner.", gt=0)
    sapo_tau_neg: float = F(SAPO_TAU_NEG, "SAPO gate temperature where the advantage is negative.", gt=0)
    kl_cov_ratio: float = F(KL_COV_RATIO, "KL-Cov: fraction of the batch's policy tokens, those of largest "
                            "advantage/log-prob covariance, that get the |log r| penalty (arXiv 2505.22617).",
                            gt=0, le=1)
    kl_cov_coef: float = F(KL_COV_COEF, "KL-Cov: coefficient of the |log r| penalty on the selected tokens.", ge=0)
    clip_cov_ratio: float = F(CLIP_COV_RATIO, "Clip-Cov: fraction of the batch's policy tokens whose gradient "
                              "is dropped, drawn among those with clip_cov_lb < covariance < clip_cov_ub.",
                              gt=0, le=1)
    clip_cov_lb: float = F(CLIP_COV_LB, "Clip-Cov: lower covariance bound of the tokens it may draw.")
    clip_cov_ub: float = F(CLIP_COV_UB, "Clip-Cov: upper covariance bound of the tokens it may draw.")
    top_entropy_quantile: float = F(1.0, "High-entropy token selection (arXiv 2506.01939, TRL's "
                                    "top_entropy_quantile): only the policy tokens whose entropy is in the top "
                                    "fraction rho of the whole step's (all micro-batches and ranks) carry the "
                                    "policy gradient; 1 = every token. The paper uses 0.2. Costs the old "
                                    "log-prob pass when the update would otherwise skip it.", gt=0, le=1)
    overlong_buffer: int | None = F(None, "DAPO's soft overlong punishment (arXiv 2503.14476): a linear "
                                    "penalty, 0 at limit - buffer tokens down to -overlong_penalty_factor at the "
                                    "limit, added to the score; null = off. The limit is rollout.max_new_tokens "
                                    "(overlong_scope: turn, each policy turn) or the episode's token limit "
                                    "(episode).", ge=1, le=MAX_TOKENS)
    overlong_penalty_factor: float = F(OVERLONG_PENALTY_FACTOR, "The overlong penalty at the length limit.", ge=0)
    overlong_scope: Literal["episode", "turn"] = F("episode", "What the overlong buffer measures: the whole "
                                                   "episode's policy tokens against its limit, or each policy turn "
                                                   "against rollout.max_new_tokens (penalties summed). The same for "
                                                   "single-turn runs.")
    reward_aggregation: Literal["sum", "normalize_then_sum"] = F(
        "sum", "Several reward functions: sum (the weighted sum is the score, normalised as one) or "
        "normalize_then_sum (GDPO, arXiv 2601.05242; TRL's multi_objective_aggregation): each reward is "
        "normalised within its group, the weighted sum is normalised over the batch and is the advantage. "
        "Needs advantage_estimator grpo and kl_mode loss or none.")
    gamma: float = F(GAMMA, "Discount (GAE, REINFORCE++).", ge=0, le=1)
    lam: float = F(GAE_LAMBDA, "GAE lambda.", ge=0, le=1)
    reward_clip: float | None = F(None, "Clip rewards to [-c, c] at the response and token level "
                                  "(5-10 typical): the episode's score before and after normalisation, and "
                                  "each token's KL penalty (kl_mode: reward); null = off.", gt=0)
    reward_norm_mean: NormType = F("none", "Reward normalisation mean: batch, group, running or none.")
    reward_norm_std: NormType = F("none", "Reward normalisation std: batch, group, running or none.")
    reward_norm_by_domain: bool = F(False, "Normalise rewards within each reward domain (data.domain_key): "
                                    "batch statistics are taken over the domain's samples only, so a domain "
                                    "on a large scale does not swamp the others. Not with 'running'.")
    whiten_advantages: bool = F(False, "Whiten advantages over the batch's valid tokens.")
    advantage_clip: float | None = F(None, "Clip advantages to [-c, c]; null = off.", gt=0)
    kl_mode: Literal["none", "loss", "reward"] = F("loss", "KL to the reference: none, a loss term, "
                                                   "or a per-token penalty in the reward.")
    kl_coef: float = F(0.001, "KL coefficient beta (initial value when adaptive).", ge=0)
    kl_estimator: KLEstimator = F("k3", "KL estimator: k1, k2, k3 (low variance) or abs.")
    kl_target: float | None = F(None, "Target KL of the adaptive controller; null = fixed beta.", gt=0)
    kl_horizon: int = F(10000, "Horizon of the adaptive KL controller.", ge=1)
    entropy_coef: float = F(0.0, "Entropy bonus coefficient.", ge=0)
    difficulty_mask: bool = F(False, "Train only on groups with low < mean score < high.")
    difficulty_low: float = F(DIFFICULTY_LOW, "Difficulty mask lower bound.")
    difficulty_high: float = F(DIFFICULTY_HIGH, "Difficulty mask upper bound.")
    difficulty_weighting: bool = F(False, "Weight samples by group difficulty, in [0.5, 2.0].")
    mask_truncated: bool = F(False, "Leave truncated responses out of the loss (overlong filtering).")
    dynamic_sampling: bool = F(False, "DAPO's filter groups: drop groups without a learning signal and draw "
                               "more prompts until the step has prompts_per_step informative groups.")
    dynamic_sampling_filter: Literal["equal_scores", "difficulty"] = F(
        "equal_scores", "Which groups dynamic sampling drops: equal_scores (all scores equal: GRPO advantage 0) "
        "or difficulty (mean score outside difficulty_low..difficulty_high).")
    dynamic_sampling_max_draws: int = F(3, "Most draws of prompts_per_step prompts in one step; then the step "
                                        "trains on the informative groups it has.", ge=1)
    value_clip: float | None = F(0.5, "PPO value clip range; null = off.", gt=0)

    @property
    def clip_low(self) -> float:
        return self.pg_clip if self.pg_clip_low is None else self.pg_clip_low

    @property
    def clip_high(self) -> float:
        return self.pg_clip if self.pg_clip_high is None else self.pg_clip_high

    @property
    def dual_clip_value(self) -> float | None:
        if not self.dual_clip:
            return None
        return dual_clip_default(self.pg_clip) if self.dual_clip_c is None else self.dual_clip_c

    @model_validator(mode="after")
    def _check(self) -> "AlgorithmConfig":
        if self.reward_norm_by_domain and "running" in (self.reward_norm_mean, self.reward_norm_std):
            raise ValueError("reward_norm_by_domain = true keeps no running statistics per domain: set "
                             "reward_norm_mean / reward_norm_std to batch, group or none")
        if not self.difficulty_low < self.difficulty_high:
            raise ValueError(
                f"difficulty_low ({self.difficulty_low}) must be < difficulty_high ({self.difficulty_high})"
            )
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(f"clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})")
        if self.reward_aggregation == "normalize_then_sum":
            if self.advantage_estimator != "grpo":
                raise ValueError(f"reward_aggregation = normalize_then_sum makes the advantage itself (GDPO), "
                                 f"in place of the estimator: set advantage_estimator = grpo, not "
                                 f"{self.advantage_estimator!r}")
            if self.kl_mode == "reward":
                raise ValueError("reward_aggregation = normalize_then_sum has no place for a KL penalty in the "
                                 "reward: set kl_mode to loss or none")
        return self


class OptimConfig(Section):
    lr: float = F(1e-6, "Policy learning rate (AdamW).", gt=0)
    critic_lr: float = F(1e-5, "Critic learning rate (PPO).", gt=0)
    weight_decay: float = F(0.0, "AdamW weight decay.", ge=0)
    betas: tuple[Beta, Beta] = F((0.9, 0.999), "AdamW betas, each in [0, 1).")
    eps: float = F(1e-8, "AdamW epsilon.", gt=0)
    schedule: Literal["constant", "linear", "cosine"] = F("constant", "Learning-rate decay after warm-up.")
    warmup_steps: int = F(0, "Linear warm-up steps.", ge=0)
    min_lr_ratio: float = F(0.0, "Final learning rate of linear/cosine decay, as a fraction of lr.", ge=0, le=1)
    max_grad_norm: float = F(MAX_GRAD_NORM, "Clip the gradient norm to this (ROLL's PPO defaults).", gt=0)


class TrainerConfig(Section):
    max_steps: int = F(100, "Training steps (one step = one batch of prompts).", ge=1)
    max_epochs: float | None = F(None, "Stop after this many passes over the training prompts, if that "
                                 "comes before max_steps (the schedule decays over the shorter); "
                                 "null = max_steps only.", gt=0)
    seed: int = F(42, "Seed of data order, sampling and initialisation.")
    ppo_epochs: int = F(1, "Passes over each rollout batch.", ge=1, le=MAX_SAMPLES)
    mini_batch_size: int | None = F(None, "Samples per optimizer step; null = the whole batch "
                                    "(one optimizer step per epoch).", ge=1, le=MAX_SAMPLES)
    micro_batch_size: int = F(8, "Samples per forward/backward (gradient accumulation).", ge=1, le=MAX_SAMPLES)
    max_tokens_per_micro_batch: int | None = F(
        None, "Token budget per forward/backward instead of micro_batch_size: rows sorted by length and "
        "packed so that rows x padded length (prompt + response) <= budget, a longer row alone; each "
        "micro-batch trimmed to its longest row. Same gradient (global loss denominators), less padding "
        "on mixed lengths. null = micro_batch_size rows each.", ge=1, le=MAX_TOKENS)
    padding_free: bool = F(
        False, "Run each micro-batch's forward passes as one packed row without padding: the sequences' "
        "real tokens back to back, position ids restarting per sequence, no attention mask; transformers "
        "keeps them apart (flash_attention_2: the varlen kernel; sdpa / eager: a block-diagonal mask, "
        "attention over the whole packed row, so slower on CPU for many rows). Same log-probs; checked "
        "against the padded forward at start-up. No prompt sharing then; the critic stays padded. With "
        "max_tokens_per_micro_batch the budget counts real tokens.")
    save_every: int = F(50, "Checkpoint every N steps (and at the end); 0 = only at the end.", ge=0)
    keep_checkpoints: int = F(2, "Keep the newest N checkpoints.", ge=1)
    eval_every: int = F(0, "Evaluate every N steps; 0 = only before and after training.", ge=0)
    samples_every: int = F(10, "Log a table of sample completions every N steps; 0 = never.", ge=0)
    logprob_impl: Literal["fused", "naive", "chunked_grad"] = F(
        "fused", "fused = log-probs from hidden states in chunks (no [B, T, V] logits); naive = from full "
        "logits; chunked_grad = from hidden states in whole-vocabulary-row token chunks, one recompute in "
        "the backward (none with a frozen LM head), no [B, T, V] logits either (for GPUs; unmeasured there).")
    share_prompt_prefix: bool = F(True, "Compute each prompt once per group: generation prefills it once "
                                  "and repeats its KV cache; log-prob passes run each distinct prompt once "
                                  "(same numbers, less work). Skipped automatically for models without a "
                                  "plain KV cache or with gradient checkpointing.")
    logprob_chunk_size: int | None = F(None, "Tokens per log-prob chunk; null = automatic.", ge=1, le=MAX_TOKENS)
    device: Literal["auto", "cpu", "cuda"] = F("auto", "auto = cuda when available.")
    parallel: Literal["ddp", "fsdp"] = F(
        "ddp", "Data parallelism when launched with torchrun (ignored in one process): ddp = every "
        "process holds the whole model, gradients all-reduced (gloo on the CPU, NCCL on GPUs); fsdp = "
        "FSDP2 shards parameters, gradients and optimizer state over the GPUs (CUDA only, no LoRA or "
        "critic yet). See docs/scaling.md.")
    num_threads: int | None = F(None, "torch CPU threads; null = torch's default.", ge=1)
    max_consecutive_skips: int = F(3, "Stop after this many optimizer steps in a row skipped for a "
                                   "non-finite loss or gradient norm, or this many steps in a row with no "
                                   "sample that has a valid reward.", ge=1)
    doctor_every: int = F(10, "Run the doctor's detectors (docs/stability.md) every N steps during training; a "
                          "detector that fires prints one line (counted in health/doctor_findings); 0 = off.", ge=0)
    halt_on: list[str] = F([], "Detectors that stop the run when they fire (state checkpointed first, exit "
                           "status 1), e.g. [entropy_collapse, mismatch]; [] = never halt. Needs doctor_every > 0.")
    doctor_thresholds: dict[str, float] = F({}, "The in-run detectors' thresholds changed from their defaults, "
                                            "e.g. {entropy_collapse_ratio: 0.2} (names: docs/stability.md).")
    trackers: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = F(
        [], "Extra trackers besides metrics.jsonl: tensorboard, wandb, mlflow, trackio (a list; "
        "one name is a list of one).")
    project: str | None = F(None, "Project name for wandb / mlflow / trackio.")
    run_name: str | None = F(None, "Run name for trackers; null = the output directory's name.")

    @field_validator("trackers", mode="before")
    @classmethod
    def _one_tracker(cls, value: Any) -> Any:
        # trainer.trackers=wandb (TRL's report_to=wandb) means the one-item list
        return [value] if isinstance(value, str) else value

    @field_validator("halt_on", mode="before")
    @classmethod
    def _one_detector(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("halt_on", "doctor_thresholds")
    @classmethod
    def _check_doctor(cls, value: Any, info: ValidationInfo) -> Any:
        # the names live with the detectors (pure Python, no torch)
        from .doctor_checks import check_doctor_setting

        check_doctor_setting(info.field_name, value, doctor_every=info.data.get("doctor_every"))
        return value


class EvalConfig(Section):
    num_samples: int = F(4, "Sampled completions per prompt for pass@k (0 = greedy only).", ge=0, le=MAX_SAMPLES)
    temperature: float = F(1.0, "Sampling temperature of the pass@k samples.", gt=0)
    max_new_tokens: int | None = F(None, "null = rollout.max_new_tokens.", ge=1, le=MAX_TOKENS)
    accuracy_reward: str | None = F(None, "Reward whose score decides correctness; null = the first.")
    correct_threshold: float = F(1.0, "A completion is correct when that reward is >= this.")
    batch_size: int = F(64, "Prompts per generate call during evaluation.", ge=1, le=MAX_SAMPLES)


class DemoConfig(Section):
    """The built-in demo (used when ``data.train_path`` is null): a tiny model learns to reverse
    strings; a short supervised warm-start, then RL. The defaults were measured on 2 CPU cores:
    held-out accuracy ~30% after the warm-start, 81-99% after 600 GRPO steps (8 seeds).
    ``demo.task=tool`` is the multi-turn demo instead (``steadyrl.config.presets.DEMO_TOOL_CONFIG``):
    multiplication with a calculator tool; measured on 2 CPU cores: held-out success 0-6% after
    its warm-start, 78-100% after 60 GRPO steps (3 seeds). ``demo.task=vision`` is the image demo
    (``steadyrl.config.presets.DEMO_VISION_CONFIG``, docs/vision.md)."""

    task: Literal["reverse", "tool", "vision"] = F(
        "reverse", "Which built-in task: reverse (reverse a string, one turn), tool (multiply two numbers with "
        "a calculator tool, multi-turn) or vision (read a codeword off coloured squares with a tiny "
        "vision-language model); on the command line without a config, tool and vision start from their "
        "own settings (steadyrl.config.presets.DEMO_CONFIGS).")
    n_layers: int = F(2, "Transformer layers of the demo model.", ge=1, le=MAX_WIDTH)
    hidden_size: int = F(128, "Hidden size of the demo model.", ge=8, le=MAX_WIDTH)
    n_heads: int = F(4, "Attention heads of the demo model.", ge=1, le=MAX_WIDTH)
    min_len: int = F(3, "Shortest string to reverse.", ge=1)
    max_len: int = F(6, "Longest string to reverse (longer strings leave RL too few right samples "
                     "to climb from).", ge=1, le=MAX_WIDTH)
    num_train: int = F(4000, "Training prompts.", ge=1, le=MAX_SAMPLES)
    num_eval: int = F(500, "Held-out prompts.", ge=1, le=MAX_SAMPLES)
    warmstart_steps: int = F(125, "Supervised warm-start steps before RL (0 = none); stops on purpose "
                             "before the supervised curve's sharp rise, at ~30% held-out accuracy.", ge=0)
    warmstart_lr: float = F(1e-3, "Warm-start learning rate.", gt=0)
    warmstart_batch_size: int = F(32, "Warm-start batch size.", ge=1, le=MAX_SAMPLES)
    tool_skill_steps: int = F(400, "Tool task only: supervised steps on tool transcripts alone, before "
                              "demo.warmstart_steps (the format and copying the numbers in and out).", ge=0)
    tool_skill_lr: float = F(2e-3, "Tool task only: learning rate of the demo.tool_skill_steps.", gt=0)
    tool_fraction: float = F(0.1, "Tool task only: fraction of the demo.warmstart_steps transcripts that call "
                             "the calculator (the rest answer at once), so RL starts from rare tool use.",
                             ge=0, le=1)
    max_images: int = F(3, "Vision task only: most squares in a prompt (1 to 3; each is one letter).", ge=1, le=3)
    decoy_fraction: float = F(0.5, "Vision task only: fraction of the warm-start answers written with a decoy "
                              "colour table (the rest are random letters), so RL starts from a model that "
                              "reads each square but does not know the real table.", ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> "DemoConfig":
        if self.min_len > self.max_len:
            raise ValueError(f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")
        if self.hidden_size % self.n_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by n_heads ({self.n_heads})")
        return self


def _check_generated(data: DataConfig) -> None:
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


def _check_sources(config: "Config") -> None:
    """One of train_path / train_sources, one of eval_path / eval_sources; domains need domain_key."""
    data = config.data
    _check_generated(data)
    for one, many in (("train_path", "train_sources"), ("eval_path", "eval_sources")):
        if getattr(data, one) is not None and getattr(data, many) is not None:
            raise ValueError(f"data.{one} and data.{many} are both set: use {one} for one file or {many} "
                             "for several, not both")
        sources = getattr(data, many)
        if sources is None:
            continue
        if not sources:
            raise ValueError(f"data.{many} is an empty list: give at least one source, or null")
        keys = [s.key for s in sources]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                raise ValueError(f"data.{many}[{keys.index(key)}] and data.{many}[{i}] are both named {key!r}; "
                                 f"set data.{many}[{i}].name to tell them apart")
        for i, source in enumerate(sources):
            if source.domain is not None and data.domain_key is None:
                raise ValueError(f"data.{many}[{i}].domain = {source.domain!r} needs data.domain_key: the "
                                 "column the domain is written to (e.g. domain_key: domain)")
    if data.domain_key is None:
        restricted = [i for i, r in enumerate(config.rewards) if r.domains is not None]
        if restricted:
            raise ValueError(f"rewards[{restricted[0]}].domains is set but data.domain_key is null: name the "
                             "column holding each row's domain (e.g. data.domain_key: domain)")
        if config.algorithm.reward_norm_by_domain:
            raise ValueError("algorithm.reward_norm_by_domain = true needs data.domain_key (the column "
                             "holding each row's domain)")


def overlong_limit(config: "Config") -> int:
    """The length the overlong buffer ends at: a turn's budget, or the episode's (algorithm.overlong_scope)."""
    r = config.rollout
    return r.episode_token_limit if r.multi_turn and config.algorithm.overlong_scope == "episode" else r.max_new_tokens


def _check_overlong(config: "Config") -> None:
    buffer = config.algorithm.overlong_buffer
    if buffer is not None and buffer > overlong_limit(config):
        where = ("rollout.max_new_tokens" if config.algorithm.overlong_scope == "turn"
                 else "the episode's token limit (rollout.max_new_tokens, or rollout.max_episode_tokens)")
        raise ValueError(f"algorithm.overlong_buffer = {buffer} is longer than {where} = "
                         f"{overlong_limit(config)}: the buffer is the last tokens before that limit; set it at "
                         f"most to the limit (DAPO used 4096 of 20480)")


def _check_reward_options(config: "Config") -> None:
    """A built-in reward's options against its typed model (:mod:`.reward_options`: names, types,
    ranges, required options) and the URLs of those that call a server (http's url, llm_judge's
    base_url, code's url), checked here so that a bad one stops even ``steadyrl config show``.
    What needs the machine (a model that loads, a server that answers) is checked when the reward
    is built, prefixed ``rewards[i]:``."""
    from .reward_options import option_problems  # it imports this module's neighbours, not this one

    problems = []
    for i, reward in enumerate(config.rewards):
        where = f"rewards[{i}].options"
        for key, value, problem in option_problems(reward.name, reward.options):
            at = f"{where}.{key}" if key is not None else where
            problems.append(f"{at} = {value!r}: {problem}" if key is not None and value is not None
                            else f"{at}: {problem}")
        for key, value, problem in url_option_problems(reward.name, reward.options):
            problems.append(f"{where}.{key} = {value!r}: {problem}")
    if problems:
        raise ValueError("; ".join(problems))


class Config(Section):
    """A whole run."""

    _renamed_notes: list[str] = PrivateAttr(default_factory=list)
    """Deprecation notes of the old key names this config was loaded with (:mod:`.renamed`)."""
    _written: frozenset[str] | None = PrivateAttr(default=None)
    """The dotted keys the user wrote (file and command line; :mod:`.inert`); None = not loaded by
    :func:`~steadyrl.config.loading.load_config`: the keys set on the models count."""

    def __eq__(self, other: object) -> bool:
        """Equal settings: who wrote them (``_written``) is provenance, not a setting."""
        if not isinstance(other, Config):
            return NotImplemented
        mine, theirs = ({k: v for k, v in (c.__pydantic_private__ or {}).items() if k != "_written"}
                        for c in (self, other))
        return type(self) is type(other) and self.__dict__ == other.__dict__ and mine == theirs

    __hash__ = None  # as pydantic's models: mutable, not hashable

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rewards: list[RewardConfig] = F([], "Reward functions and weights; empty = the task's default "
                                    "(the demo's reverse-match reward, or 'math').")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    demo: DemoConfig = Field(default_factory=DemoConfig)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)

    @property
    def is_demo(self) -> bool:
        return self.data.train_path is None and self.data.train_sources is None

    @model_validator(mode="after")
    def _check(self) -> "Config":
        _check_sources(self)
        if self.model.gguf_file is not None and self.is_demo:
            raise ValueError(f"model.gguf_file = {self.model.gguf_file!r} but data.train_path is not set: the "
                             "built-in demo trains its own model; set data.train_path to train the GGUF's")
        if self.model.name_or_path is None and self.model.gguf_file is None and not self.is_demo:
            raise ValueError(
                "model.name_or_path is null (the built-in demo model) but data.train_path is set: "
                "name a model for your data, or unset data.train_path for the demo"
            )
        check_config(self)  # what is not supported together (config/compat.py)
        _check_overlong(self)
        _check_reward_options(self)
        keys = [reward.key for reward in self.rewards]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                first = keys.index(key)
                raise ValueError(
                    f"rewards[{first}] and rewards[{i}] are both named {key!r}, but reward names must be "
                    f"unique (each is logged as reward/<name> and weighted by it): set rewards[i].label to "
                    f"tell them apart, e.g. label: {key}_{i} on rewards[{i}]"
                )
        return self
