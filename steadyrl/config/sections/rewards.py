"""``rewards[*]``: each reward function, its weight, options, isolation and worker limits.

Part of the typed configuration (:mod:`steadyrl.config.schema` re-exports every section).
"""

from __future__ import annotations


from typing import Any, Literal

from pydantic import Field, field_validator

from ...reward_specs import reward_name
from .base import F, MAX_MIB, MAX_PROCESSES, MAX_SECONDS, Section


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
