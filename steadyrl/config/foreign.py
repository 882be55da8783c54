"""Names other trainers (TRL, verl, OpenRLHF, NeMo-RL, SkyRL) use for steadyrl's settings, and what to write here.

:data:`FOREIGN_NAMES` answers an unknown config key that is another trainer's name with the
steadyrl key (or a short instruction) instead of a bare "unknown key"; :func:`foreign_name` looks
a dotted path up by its longest known tail. docs/migrating.md has the same mapping with the
differences in meaning, and tests/config/test_docs.py checks both agree.
"""

from __future__ import annotations

__all__ = ["FOREIGN_NAMES", "foreign_name"]

_TRL, _VERL, _BOTH, _OTHER = "TRL's", "verl's", "TRL's and verl's", None

# Names other trainers use for steadyrl settings -> (whose name, what to write instead): a
# steadyrl key, or a short instruction where no single key matches. docs/migrating.md has the
# same mapping with the differences in meaning; tests/config/test_docs.py checks every name in
# its tables is answered here. A name is matched on its whole dotted path or on its last
# components (``actor_rollout_ref.actor.ppo_mini_batch_size`` finds ``ppo_mini_batch_size``),
# so a generic last word (``path``, ``name``, ``lr``) is written with its section.
FOREIGN_NAMES: dict[str, tuple[str | None, str]] = {
    # TRL GRPOConfig / TrainingArguments
    "learning_rate": (_TRL, "optim.lr"),
    "num_generations": (_TRL, "rollout.group_size"),
    "max_completion_length": (_TRL, "rollout.max_new_tokens"),
    "max_prompt_length": (_BOTH, "data.max_prompt_tokens (longer prompts are dropped and counted)"),
    "beta": (_TRL, "algorithm.kl_coef (TRL's beta 0 means no KL: algorithm.kl_mode=none)"),
    "epsilon": (_TRL, "algorithm.pg_clip"),
    "epsilon_low": (_TRL, "algorithm.pg_clip_low"),
    "epsilon_high": (_TRL, "algorithm.pg_clip_high (the same number, except with TRL's loss_type=cispo, where "
                          "epsilon_high caps the weight itself: pg_clip_high = epsilon_high - 1)"),
    "delta": (_TRL, "algorithm.dual_clip=true with algorithm.dual_clip_c set to delta"),
    "use_bias_correction_kl": (_TRL, "nothing: algorithm.kl_mode=loss is TRL's use_bias_correction_kl=false "
                                     "(the k3 term not multiplied by the ratio); there is no corrected term"),
    "loss_type": (_TRL, "algorithm.loss_agg_mode (dapo/bnpo = token-mean, grpo = seq-mean-token-mean, "
                        "dr_grpo = seq-mean-token-sum-norm), or algorithm.preset=cispo for cispo, "
                        "algorithm.policy_loss=sapo for sapo, algorithm.policy_loss=gspo with "
                        "loss_agg_mode=seq-mean-token-sum for luspo"),
    "multi_objective_aggregation": (_TRL, "algorithm.reward_aggregation (sum_then_normalize = sum, "
                                          "normalize_then_sum = normalize_then_sum)"),
    "sapo_temperature_pos": (_TRL, "algorithm.sapo_tau_pos"),
    "sapo_temperature_neg": (_TRL, "algorithm.sapo_tau_neg"),
    "importance_sampling_level": (_TRL, "algorithm.policy_loss (sequence = gspo; algorithm.preset=gspo "
                                        "also sets its clip ranges)"),
    "scale_rewards": (_TRL, "algorithm.norm_by_std (group = true, none = false)"),
    "num_iterations": (_TRL, "trainer.ppo_epochs"),
    "per_device_train_batch_size": (_TRL, "trainer.micro_batch_size"),
    "gradient_accumulation_steps": (_TRL, "trainer.mini_batch_size (samples per optimizer step, "
                                          "accumulated in micro-batches)"),
    "generation_batch_size": (_TRL, "rollout.prompts_per_step (prompts, not samples, per step; "
                                    "rollout.generation_batch_size is only prompts per generate call)"),
    "steps_per_generation": (_TRL, "rollout.prompts_per_step"),
    "mask_truncated_completions": (_TRL, "algorithm.mask_truncated"),
    "reward_funcs": (_TRL, "rewards[].name ('path/to/file.py:function')"),
    "reward_weights": (_TRL, "rewards[].weight"),
    "use_vllm": (_TRL, "rollout.engine=vllm"),
    "vllm_gpu_memory_utilization": (_TRL, "rollout.vllm.gpu_memory_utilization"),
    "vllm_importance_sampling_correction": (_TRL, "rollout.correction.mode (null = off; rollout.tis_cap is "
                                                  "the older token-truncate key)"),
    "vllm_importance_sampling_cap": (_TRL, "rollout.correction.cap (mode truncate) or rollout.correction.high "
                                           "(mode mask); rollout.tis_cap"),
    "vllm_importance_sampling_clip_max": (_TRL, "rollout.correction.cap (mode truncate) or "
                                                "rollout.correction.high (mode mask); rollout.tis_cap"),
    "vllm_importance_sampling_mode": (_TRL, "rollout.correction.mode and rollout.correction.level "
                                            "(token_truncate = level token, mode truncate; sequence_mask = "
                                            "level sequence, mode mask)"),
    "max_tool_calling_iterations": (_TRL, "rollout.multi_turn.max_turns (policy turns: TRL's tool-calling "
                                          "iterations + 1)"),
    "environment_factory": (_TRL, "rollout.multi_turn.environment (a class, file.py:Class)"),
    "num_train_epochs": (_TRL, "trainer.max_epochs"),
    "lr_scheduler_type": (_BOTH, "optim.schedule"),
    "adam_beta1": (_TRL, "optim.betas (a pair: [beta1, beta2])"),
    "adam_beta2": (_TRL, "optim.betas (a pair: [beta1, beta2])"),
    "adam_epsilon": (_TRL, "optim.eps"),
    "warmup_ratio": (_TRL, "optim.warmup_steps (a number of steps: warmup_ratio x trainer.max_steps)"),
    "repetition_penalty": (_TRL, "nothing: only rollout.temperature, rollout.top_p and rollout.top_k shape the sampling "
                                 "(the trainer recomputes exactly that distribution's log-probs)"),
    "min_p": (_TRL, "nothing: only rollout.temperature, rollout.top_p and rollout.top_k shape the sampling"),
    "generation_kwargs": (_TRL, "rollout.temperature, rollout.top_p, rollout.top_k (nothing else shapes the sampling)"),
    "sync_ref_model": (_TRL, "nothing: the reference policy is the starting model for the whole run "
                             "(algorithm.kl_mode=none for none)"),
    "ref_model_sync_steps": (_TRL, "nothing: the reference policy is never synced (algorithm.kl_mode=none for none)"),
    "ref_model_mixup_alpha": (_TRL, "nothing: the reference policy is never synced (algorithm.kl_mode=none for none)"),
    "log_completions": (_TRL, "trainer.samples_every (a table of completions every N steps in samples.jsonl)"),
    "num_completions_to_print": (_TRL, "trainer.samples_every (a table of completions every N steps in samples.jsonl)"),
    "logging_steps": (_TRL, "nothing: every step is logged (metrics.jsonl)"),
    "vllm_mode": (_TRL, "rollout.engine=vllm (colocate; server mode has no equivalent)"),
    "bf16": (_TRL, "model.dtype=auto (float32 weights computed in bfloat16 on a GPU, as TRL's bf16=True; "
                   "model.dtype=bfloat16 stores the weights in bfloat16: docs/precision.md)"),
    "fp16": (_TRL, "model.dtype=float16"),
    "model_init_kwargs": (_TRL, "model.dtype, model.attn_implementation, model.trust_remote_code"),
    "model_name_or_path": (_TRL, "model.name_or_path"),
    "peft_config": (_TRL, "model.lora.enabled=true with model.lora.r, model.lora.alpha, "
                          "model.lora.target_modules"),
    "shuffle_dataset": (_TRL, "data.shuffle"),
    "report_to": (_TRL, "trainer.trackers"),
    "save_steps": (_TRL, "trainer.save_every"),
    "save_total_limit": (_TRL, "trainer.keep_checkpoints"),
    "eval_steps": (_TRL, "trainer.eval_every"),
    "output_dir": (_TRL, "the --output-dir flag of steadyrl train"),
    "disable_dropout": (_TRL, "nothing: dropout is always off"),
    "use_liger_kernel": (_TRL, "trainer.logprob_impl (fused, the default, never builds [B, T, V] logits)"),
    "liger_kernel_config": (_TRL, "trainer.logprob_impl (fused, the default, never builds [B, T, V] logits)"),
    "cast_lm_head_to_fp32": (_TRL, "nothing: log-softmax statistics are float32 whatever the weights' dtype"),
    "num_generations_eval": (_TRL, "eval.num_samples (sampled completions per held-out prompt, for pass@k)"),
    "vllm_importance_sampling_clip_min": (_TRL, "rollout.correction.low"),
    "vllm_enable_sleep_mode": (_TRL, "rollout.vllm.sleep_mode"),
    **dict.fromkeys(("use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta",
                     "entropy_target"), (_TRL, "algorithm.entropy_coef (a fixed coefficient: no adaptive controller)")),
    **dict.fromkeys(("log_completions_hub_repo", "log_unique_prompts", "log_multimodal"),
                    (_TRL, "trainer.samples_every (completions in samples.jsonl and the trackers)")),
    "pad_to_multiple_of": (_TRL, "trainer.padding_free (no padding multiple)"),
    **dict.fromkeys(("use_transformers_continuous_batching", "transformers_continuous_batching_config",
                     "use_transformers_paged", "cache_implementation"),
                    (_TRL, "rollout.engine (hf: generate with the model's own KV cache; vllm for throughput)")),
    **dict.fromkeys(("vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
                     "vllm_group_port"),
                    (_TRL, "nothing: there is no vLLM server mode (rollout.engine=vllm colocates)")),
    **dict.fromkeys(("vllm_model_impl", "vllm_structured_outputs_regex", "vllm_max_model_length",
                     "vllm_tensor_parallel_size"),
                    (_TRL, "nothing: the engine's settings are rollout.vllm.gpu_memory_utilization and "
                           "rollout.vllm.sleep_mode")),
    **dict.fromkeys(("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
                    (_TRL, "nothing: loss_type vespo has no equivalent")),
    "off_policy_mask_threshold": (_TRL, "nothing: no KL-based sequence masking (rollout.correction masks by "
                                        "the importance ratio)"),
    "use_bias_correction_kl": (_TRL, "nothing: the KL loss term is not multiplied by the importance ratio"),
    "router_aux_loss_coef": (_TRL, "nothing: no Mixture-of-Experts load-balancing loss is added"),
    "ds3_gather_for_generation": (_TRL, "nothing: no DeepSpeed; trainer.parallel chooses DDP or FSDP"),
    "cliprange": (_TRL, "algorithm.pg_clip"),
    "cliprange_value": (_BOTH, "algorithm.value_clip"),
    # verl ppo_trainer.yaml (actor_rollout_ref.* is matched by its last components)
    "train_files": (_VERL, "data.train_path"),
    "val_files": (_VERL, "data.eval_path"),
    "apply_chat_template_kwargs": (_VERL, "data.chat_template_kwargs"),
    "train_batch_size": (_VERL, "rollout.prompts_per_step"),
    "max_response_length": (_VERL, "rollout.max_new_tokens"),
    "response_length": (_VERL, "rollout.max_new_tokens"),
    "prompt_length": (_VERL, "data.max_prompt_tokens"),
    "model.path": (_VERL, "model.name_or_path"),
    "critic.model.path": (_VERL, "model.critic_name_or_path"),
    "enable_gradient_checkpointing": (_VERL, "model.gradient_checkpointing"),
    "lora_rank": (_VERL, "model.lora.r (with model.lora.enabled=true)"),
    "model.lora_alpha": (_VERL, "model.lora.alpha"),
    "model.target_modules": (_VERL, "model.lora.target_modules"),
    "n": (_VERL, "rollout.group_size"),
    "rollout.name": (_VERL, "rollout.engine (hf or vllm)"),
    "ppo_mini_batch_size": (_VERL, "trainer.mini_batch_size (in samples: verl's ppo_mini_batch_size x rollout.n)"),
    "ppo_micro_batch_size": (_VERL, "trainer.micro_batch_size"),
    "ppo_micro_batch_size_per_gpu": (_VERL, "trainer.micro_batch_size"),
    "log_prob_micro_batch_size": (_VERL, "trainer.micro_batch_size"),
    "log_prob_micro_batch_size_per_gpu": (_VERL, "trainer.micro_batch_size"),
    "mixed_precision.param_dtype": (_VERL, "model.dtype=auto (float32 weights and optimizer state, computed in "
                                    "bfloat16 on a GPU: docs/precision.md)"),
    "mixed_precision.reduce_dtype": (_VERL, "model.dtype=auto (gradients are reduced in float32 there)"),
    "grad_clip": (_VERL, "optim.max_grad_norm"),
    "clip_grad": (_VERL, "optim.max_grad_norm"),
    "clip_ratio": (_VERL, "algorithm.pg_clip"),
    "clip_ratio_low": (_VERL, "algorithm.pg_clip_low"),
    "clip_ratio_high": (_VERL, "algorithm.pg_clip_high"),
    "clip_ratio_c": (_VERL, "algorithm.dual_clip_c (with algorithm.dual_clip=true)"),
    "policy_loss.loss_mode": (_VERL, "algorithm.policy_loss (vanilla = ppo)"),
    "entropy_coeff": (_VERL, "algorithm.entropy_coef"),
    "use_kl_loss": (_VERL, "algorithm.kl_mode=loss"),
    "kl_loss_coef": (_VERL, "algorithm.kl_coef"),
    "overlong_buffer.enable": (_VERL, "algorithm.overlong_buffer (a length in tokens; null = off)"),
    "overlong_buffer.len": (_VERL, "algorithm.overlong_buffer"),
    "overlong_buffer.penalty_factor": (_VERL, "algorithm.overlong_penalty_factor"),
    "ppo_kl_coef": (_VERL, "algorithm.kl_cov_coef (with algorithm.policy_loss=kl_cov)"),
    "tau_pos": (_VERL, "algorithm.sapo_tau_pos"),
    "tau_neg": (_VERL, "algorithm.sapo_tau_neg"),
    "kl_loss_type": (_VERL, "algorithm.kl_estimator (low_var_kl = k3, kl = k1, mse = k2)"),
    "actor.optim.lr": (_VERL, "optim.lr"),
    "critic.optim.lr": (_VERL, "optim.critic_lr"),
    "lr_warmup_steps": (_VERL, "optim.warmup_steps"),
    "lr_warmup_steps_ratio": (_VERL, "optim.warmup_steps (a number of steps)"),
    "warmup_style": (_VERL, "optim.schedule"),
    # verl multi-turn (actor_rollout_ref.rollout.multi_turn.*)
    "multi_turn.enable": (_VERL, "rollout.multi_turn.tools, rollout.multi_turn.environment or "
                                 "rollout.multi_turn.agent (episodes are multi-turn when one is set)"),
    "multi_turn.enabled": (_VERL, "rollout.multi_turn.tools, rollout.multi_turn.environment or "
                                  "rollout.multi_turn.agent (episodes are multi-turn when one is set; "
                                  "rollout.multi_turn.enabled is read from them, not written)"),
    "max_assistant_turns": (_VERL, "rollout.multi_turn.max_turns"),
    "max_user_turns": (_VERL, "rollout.multi_turn.max_turns (policy turns; an episode has one observation fewer)"),
    "tool_config_path": (_VERL, "rollout.multi_turn.tools (Python functions, file.py:fn, not a YAML of tool classes)"),
    "multi_turn.format": (_VERL, "rollout.multi_turn.tool_parser (hermes in both)"),
    "max_parallel_calls": (_VERL, "rollout.multi_turn.max_tool_calls_per_turn (calls past it are answered with an "
                                  "error, "
                                  "not dropped)"),
    "max_tool_response_length": (_VERL, "rollout.multi_turn.max_observation_tokens (tokens; verl counts characters)"),
    "tool_response_truncate_side": (_VERL, "rollout.multi_turn.observation_truncation (verl's left, keep the "
                                           "start, is right "
                                           "here; verl's right is left; no middle)"),
    "interaction_config_path": (_VERL, "rollout.multi_turn.environment (a class, file.py:Class)"),
    "adv_estimator": (_VERL, "algorithm.advantage_estimator"),
    "norm_adv_by_std_in_grpo": (_VERL, "algorithm.norm_by_std"),
    "use_kl_in_reward": (_VERL, "algorithm.kl_mode=reward"),
    "kl_penalty": (_VERL, "algorithm.kl_estimator (kl = k1, low_var_kl = k3, mse = k2)"),
    "kl_ctrl.type": (_VERL, "algorithm.kl_target (null = fixed, a number = adaptive with that target)"),
    "kl_ctrl.kl_coef": (_VERL, "algorithm.kl_coef"),
    "target_kl": (_VERL, "algorithm.kl_target"),
    "kl_ctrl.horizon": (_VERL, "algorithm.kl_horizon"),
    "custom_reward_function.path": (_VERL, "rewards[].name ('path/to/file.py:function')"),
    "custom_reward_function.name": (_VERL, "rewards[].name ('path/to/file.py:function')"),
    "total_training_steps": (_VERL, "trainer.max_steps"),
    "total_epochs": (_VERL, "trainer.max_epochs"),
    "save_freq": (_VERL, "trainer.save_every"),
    "test_freq": (_VERL, "trainer.eval_every"),
    "trainer.logger": (_VERL, "trainer.trackers (the console and metrics.jsonl are always on)"),
    "project_name": (_VERL, "trainer.project"),
    "experiment_name": (_VERL, "trainer.run_name"),
    "default_local_dir": (_VERL, "the --output-dir flag of steadyrl train"),
    "resume_mode": (_VERL, "the --resume flag of steadyrl train (with --output-dir)"),
    "val_before_train": (_VERL, "nothing: with held-out data, steadyrl evaluates before and after training"),
    # verl rollout correction (algorithm.rollout_correction.*)
    "rollout_is": (_VERL, "rollout.correction.mode=truncate with rollout.correction.level (token or sequence)"),
    "rollout_is_threshold": (_VERL, "rollout.correction.cap"),
    "rollout_rs": (_VERL, "rollout.correction.mode (token / sequence = reject at that rollout.correction.level, "
                          "accepted tokens at weight 1 as in verl; with rollout_is too = truncate+mask; "
                          "geometric = geometric)"),
    "rollout_rs_threshold": (_VERL, "rollout.correction.high"),
    "rollout_rs_threshold_lower": (_VERL, "rollout.correction.low"),
    "bypass_mode": (_VERL, "rollout.correction.bypass"),
    # others
    "enable_vllm_is_correction": (_OTHER, "rollout.correction.mode (OpenRLHF's switch; null = off)"),
    "use_importance_sampling_correction": (_OTHER, "rollout.correction.mode (NeMo-RL's switch; null = off)"),
    "vllm_is_correction_type": (_OTHER, "rollout.correction.mode (tis = truncate, icepop = mask, "
                                        "seq-mask-tis = geometric+truncate)"),
    "truncated_importance_sampling_type": (_OTHER, "rollout.correction.mode (tis = truncate, icepop = mask, "
                                                   "seq-mask-tis = geometric+truncate)"),
    "vllm_is_truncated_threshold": (_OTHER, "rollout.correction.low and rollout.correction.high (and "
                                            "rollout.correction.cap for truncation)"),
    "truncated_importance_sampling_ratio": (_OTHER, "rollout.correction.cap (or rollout.correction.high for "
                                                    "the masks)"),
    "truncated_importance_sampling_ratio_min": (_OTHER, "rollout.correction.low"),
    "sequence_mask_metric": (_OTHER, "rollout.correction.mode=geometric"),
    "geo_mask_low": (_OTHER, "rollout.correction.low (with rollout.correction.mode=geometric)"),
    "geo_mask_high": (_OTHER, "rollout.correction.high (with rollout.correction.mode=geometric)"),
    "kl_coeff": (_OTHER, "algorithm.kl_coef"),
    "lambd": (_OTHER, "algorithm.lam"),
    # on-policy distillation (TRL GKDTrainer / GKDConfig / GOLDTrainer): docs/distillation.md
    "gkdtrainer": (_TRL, "teacher.name_or_path (on-policy distillation: docs/distillation.md)"),
    "teacher_model_name_or_path": (_TRL, "teacher.name_or_path"),
    "gkdconfig.lmbda": (_TRL, "nothing: every sample is the student's own (on-policy); set teacher.name_or_path"),
    "gkdconfig.beta": (_TRL, "nothing: the distillation signal is always the reverse KL at the sampled token "
                             "(GKD's beta=1), weighted by teacher.distill_coef"),
    "gkdconfig.temperature": (_TRL, "rollout.temperature (student and teacher log-probs are both taken at it)"),
    "goldtrainer": (_TRL, "nothing: no cross-tokenizer distillation; teacher.name_or_path must share the "
                          "policy's tokenizer"),
    "rank": (_OTHER, "model.lora.r"),
    "lora_r": (_OTHER, "model.lora.r"),
    "lora_alpha": (_OTHER, "model.lora.alpha"),
    "lora_dropout": (_OTHER, "model.lora.dropout"),
}


def foreign_name(path: str) -> tuple[str | None, str] | None:
    """``FOREIGN_NAMES``' entry for the longest tail of ``path`` it has, or None."""
    parts = path.lower().split(".")
    for start in range(len(parts)):
        entry = FOREIGN_NAMES.get(".".join(parts[start:]))
        if entry:
            return entry
    return None
