"""One rule for load-time notes: a note names a key the user wrote that cannot act, why, and what
makes it act (steadyrl/config/inert.py). Per rule of the table, the key gets a note where it cannot
act and none where it can; keys the user never wrote (defaults, presets, the demo, a --resume's
saved config) get none."""

import pytest
import torch

from steadyrl.config import config_notes, load_config
from steadyrl.config.inert import LOSS_OPTIONS, RATIO_ONE_LOSSES, RULES
from steadyrl.run.directory import check_saved_config, with_hash_line, write_run_config

torch.set_num_threads(1)

_NO_DEMO = {"demo": False}

# key written, overrides where it cannot act (with a piece of the reason), overrides where it acts
CASES = [
    ("algorithm.kl_coef", ["algorithm.kl_mode=none"], "kl_mode is none", ["algorithm.kl_mode=loss"]),
    ("algorithm.kl_estimator", ["algorithm.kl_mode=none"], "kl_mode is none", ["algorithm.kl_mode=reward"]),
    ("algorithm.kl_target", ["algorithm.kl_mode=none"], "kl_mode is none", ["algorithm.kl_mode=loss"]),
    ("algorithm.kl_horizon", ["algorithm.kl_mode=loss"], "kl_target is null", ["algorithm.kl_target=0.1"]),
    ("algorithm.gamma", [], "advantage_estimator=grpo does not take it", ["algorithm.preset=ppo"]),
    ("algorithm.lam", [], "advantage_estimator=grpo does not take it", ["algorithm.preset=ppo"]),
    ("algorithm.norm_by_std", ["algorithm.preset=rloo"], "does not take it", []),
    ("algorithm.group_stats", ["algorithm.preset=ppo"], "does not take it", []),
    ("algorithm.value_clip", [], "trains no value model", ["algorithm.preset=ppo"]),
    ("algorithm.pg_clip", ["algorithm.policy_loss=sapo"], "clips nothing", ["trainer.ppo_epochs=2"]),
    ("algorithm.pg_clip_low", ["algorithm.policy_loss=kl_cov"], "clips nothing", ["trainer.ppo_epochs=2"]),
    ("algorithm.pg_clip_high", ["algorithm.policy_loss=vanilla_pg"], "clips nothing", ["trainer.mini_batch_size=4"]),
    ("algorithm.pg_clip", ["algorithm.pg_clip_low=0.1", "algorithm.pg_clip_high=0.3", "trainer.ppo_epochs=2"],
     "pg_clip_low and pg_clip_high are both set", ["algorithm.pg_clip_low=0.1", "trainer.ppo_epochs=2"]),
    ("algorithm.dual_clip_c", ["trainer.ppo_epochs=2"], "dual_clip is false",
     ["algorithm.dual_clip=true", "trainer.ppo_epochs=2"]),
    ("algorithm.dual_clip", ["algorithm.policy_loss=cispo", "trainer.ppo_epochs=2"], "has no dual clip",
     ["algorithm.policy_loss=clip_cov", "trainer.ppo_epochs=2"]),
    ("algorithm.sapo_tau_pos", ["algorithm.policy_loss=ppo"], "only policy_loss sapo reads it",
     ["algorithm.policy_loss=sapo", "trainer.ppo_epochs=2"]),
    ("algorithm.sapo_tau_neg", ["algorithm.policy_loss=sapo"], "the SAPO gate is 1",
     ["algorithm.policy_loss=sapo", "trainer.ppo_epochs=3"]),
    ("algorithm.kl_cov_ratio", ["algorithm.policy_loss=ppo"], "only policy_loss kl_cov reads it",
     ["algorithm.policy_loss=kl_cov", "trainer.ppo_epochs=2"]),
    ("algorithm.kl_cov_ratio", ["algorithm.policy_loss=kl_cov"], "the |log r| penalty is 0",
     ["algorithm.policy_loss=kl_cov", "trainer.mini_batch_size=8"]),
    ("algorithm.kl_cov_coef", ["algorithm.policy_loss=kl_cov"], "the |log r| penalty is 0",
     ["algorithm.policy_loss=kl_cov", "trainer.mini_batch_size=8"]),
    ("algorithm.clip_cov_ratio", ["algorithm.policy_loss=ppo"], "only policy_loss clip_cov reads it",
     ["algorithm.policy_loss=clip_cov"]),  # clip_cov acts at ratio 1: it drops the selected tokens' gradient
    ("algorithm.clip_cov_lb", [], "only policy_loss clip_cov", ["algorithm.policy_loss=clip_cov"]),
    ("algorithm.clip_cov_ub", [], "only policy_loss clip_cov", ["algorithm.policy_loss=clip_cov"]),
    ("algorithm.dynamic_sampling_filter", [], "dynamic_sampling is false", ["algorithm.dynamic_sampling=true"]),
    ("algorithm.dynamic_sampling_max_draws", [], "dynamic_sampling is false", ["algorithm.dynamic_sampling=true"]),
    ("algorithm.difficulty_low", [], "difficulty_mask is false", ["algorithm.difficulty_mask=true"]),
    ("algorithm.difficulty_high", [], "difficulty_mask is false",
     ["algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_filter=difficulty"]),
    ("algorithm.norm_length", [], "loss_agg_mode=token-mean", ["algorithm.loss_agg_mode=seq-mean-token-sum-norm"]),
    ("algorithm.overlong_penalty_factor", [], "overlong_buffer is null", ["algorithm.overlong_buffer=4"]),
    ("algorithm.overlong_scope", [], "overlong_buffer is null", ["algorithm.overlong_buffer=4"]),
    ("model.bf16_update", ["model.dtype=float32"], "keeps float32 weights", ["model.dtype=bfloat16",
                                                                             "optim.lr=1e-4"]),
    ("algorithm.policy_loss", [], "makes the ratio pi / pi_old exactly 1", ["trainer.ppo_epochs=2"]),
    *((f"teacher.{k}", [], "teacher.name_or_path is null", ["teacher.name_or_path=some/teacher"])
      for k in ("revision", "dtype", "device", "trust_remote_code", "distill_coef", "task_rewards")),
]

_VALUES = {"algorithm.kl_coef": "0.04", "algorithm.kl_estimator": "k2", "algorithm.kl_target": "0.1",
           "algorithm.kl_horizon": "500", "algorithm.gamma": "0.9", "algorithm.lam": "0.9",
           "algorithm.norm_by_std": "false", "algorithm.group_stats": "sample", "algorithm.value_clip": "0.3",
           "algorithm.pg_clip": "0.1", "algorithm.pg_clip_low": "0.1", "algorithm.pg_clip_high": "0.28",
           "algorithm.dual_clip_c": "4", "algorithm.dual_clip": "true", "algorithm.sapo_tau_pos": "2",
           "algorithm.sapo_tau_neg": "2", "algorithm.kl_cov_ratio": "0.01", "algorithm.kl_cov_coef": "2",
           "algorithm.clip_cov_ratio": "0.01", "algorithm.clip_cov_lb": "0.5", "algorithm.clip_cov_ub": "4",
           "algorithm.dynamic_sampling_filter": "difficulty", "algorithm.dynamic_sampling_max_draws": "5",
           "algorithm.difficulty_low": "0.2", "algorithm.difficulty_high": "0.9",
           "algorithm.norm_length": "64", "algorithm.overlong_penalty_factor": "0.5",
           "algorithm.overlong_scope": "turn", "model.bf16_update": "stochastic_rounding", "teacher.revision": "main",
           "teacher.dtype": "bfloat16", "teacher.device": "cpu", "teacher.trust_remote_code": "true",
           "teacher.distill_coef": "0.5", "teacher.task_rewards": "false",
           "algorithm.policy_loss": "sapo"}


def _notes_on(key: str, overrides: list[str]) -> list[str]:
    # without the demo: the defaults, plus what the test writes
    written = [o for o in overrides if o.split("=")[0] != key]
    config = load_config(None, [f"{key}={_VALUES[key]}", *written], **_NO_DEMO)
    return [n for n in config_notes(config) if n.startswith(f"{key}=")]


@pytest.mark.parametrize("key,inert,why,acts", CASES)
def test_a_written_key_that_cannot_act_gets_a_note_naming_why(key, inert, why, acts):
    notes = _notes_on(key, inert)
    assert len(notes) >= 1 and why in notes[0] and "has no effect" in notes[0], notes


@pytest.mark.parametrize("key,inert,why,acts", CASES)
def test_the_same_key_where_it_acts_gets_no_note(key, inert, why, acts):
    assert _notes_on(key, acts) == []


@pytest.mark.parametrize("key,inert,why,acts", CASES)
def test_a_key_left_unset_gets_no_note_where_it_would_be_inert(key, inert, why, acts):
    config = load_config(None, [o for o in inert if o.split("=")[0] != key], **_NO_DEMO)
    assert not [n for n in config_notes(config) if n.startswith(f"{key}=")]


def test_every_rule_of_the_table_is_tested():
    tested = {key for key, *_ in CASES}
    assert {key for rule in RULES for key in rule.keys} <= tested


def test_the_loss_options_table_matches_the_registry():
    from steadyrl.functional.losses import POLICY_LOSS_OPTIONS

    assert LOSS_OPTIONS == {name: opts for name, opts in POLICY_LOSS_OPTIONS.items() if opts}


@pytest.mark.parametrize("loss", sorted(RATIO_ONE_LOSSES))
def test_a_ratio_one_loss_has_exactly_ppos_gradient_so_its_note_is_true(loss):
    """At logprobs == old_logprobs (one epoch, one mini-batch) each noted loss's gradient is ppo's."""
    from steadyrl.functional import POLICY_LOSSES

    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 3
    adv = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.float64)
    mask[1, 4:] = 0
    grads = {}
    for name in ("ppo", loss):
        logp = old.clone().requires_grad_(True)
        kwargs = {"selected": torch.ones(4, 6, dtype=torch.bool)} if name == "kl_cov" else {}
        value, _ = POLICY_LOSSES[name](logp, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=None,
                                      loss_agg_mode="seq-mean-token-mean", **kwargs)
        value.backward()
        grads[name] = logp.grad
    torch.testing.assert_close(grads[loss], grads["ppo"], rtol=1e-12, atol=1e-12)


def test_default_configs_have_no_notes():
    assert config_notes(load_config(None, [])) == []
    assert config_notes(load_config(None, [], demo=False)) == []
    for task in ("tool", "vision"):
        assert config_notes(load_config(None, [f"demo.task={task}"])) == []


def test_a_resume_of_a_default_run_prints_no_has_no_effect_notes(tmp_path):
    from steadyrl.run.start import load_run_config

    write_run_config(load_config(None, []), tmp_path)  # what train wrote for a run with the defaults
    check_saved_config(tmp_path)  # the written-keys line is inside the hashed text
    config = load_run_config(None, [], output_dir=str(tmp_path), resume=True)
    assert config_notes(config) == []


def test_a_run_dir_saved_before_the_written_keys_line_resumes_without_notes(tmp_path):
    from steadyrl.config.loading import dump_config

    for preset in ("grpo", "dr_grpo", "ppo", "gspo"):
        (tmp_path / "config.yaml").write_text(with_hash_line(dump_config(load_config(
            None, [f"algorithm.preset={preset}"], demo=False))))
        assert [n for n in config_notes(load_config(tmp_path / "config.yaml")) if "has no effect" in n] == []


def test_a_key_the_user_wrote_is_still_noted_on_resume(tmp_path):
    from steadyrl.run.start import _portable

    config = load_config(None, ["algorithm.preset=dr_grpo", "algorithm.kl_coef=0.04"])
    write_run_config(_portable(config), tmp_path)  # as prepare_run_dir writes it
    again = load_config(tmp_path / "config.yaml", ["trainer.max_steps=5"])
    notes = config_notes(again)
    assert [n for n in notes if n.startswith("algorithm.kl_coef=0.04 has no effect")], notes
    write_run_config(again, tmp_path)  # the resumed run's file keeps the first run's keys and the new one
    text = (tmp_path / "config.yaml").read_text()
    assert "algorithm.kl_coef" in text.splitlines()[0] and "trainer.max_steps" in text.splitlines()[0]


def test_the_migration_guides_silent_keys_now_get_notes():
    """#42 item 6: each of these was set without a word."""
    cases = [(["algorithm.policy_loss=sapo", "algorithm.pg_clip=0.1"], "algorithm.pg_clip=0.1"),
             (["algorithm.kl_cov_coef=2"], "algorithm.kl_cov_coef=2.0"),
             (["algorithm.clip_cov_ratio=0.01"], "algorithm.clip_cov_ratio=0.01"),
             (["algorithm.overlong_penalty_factor=0.5"], "algorithm.overlong_penalty_factor=0.5"),
             (["model.bf16_update=master"], "model.bf16_update=master")]
    for overrides, start in cases:
        notes = config_notes(load_config(None, overrides))
        assert any(n.startswith(f"{start} has no effect") for n in notes), (overrides, notes)


def test_the_distillation_pages_example_gets_no_preset_note(tmp_path):
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "distillation.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", page, re.S).group(1)
    (tmp_path / "opd.yaml").write_text(example)
    notes = config_notes(load_config(tmp_path / "opd.yaml"))
    assert not [n for n in notes if "preset" in n], notes


def test_an_unwritten_preset_gets_no_note_but_a_written_one_does():
    assert not config_notes(load_config(None, ["algorithm.advantage_estimator=rloo"]))
    notes = config_notes(load_config(None, ["algorithm.preset=grpo", "algorithm.advantage_estimator=rloo"]))
    assert any(n.startswith("algorithm.preset=grpo but") for n in notes)
    notes = config_notes(load_config(None, ["algorithm.preset=cispo"]))
    assert notes and notes[0].startswith("algorithm.preset=cispo (its policy_loss=cispo)")


def test_an_edited_copy_of_a_run_config_counts_what_differs_from_the_defaults(tmp_path):
    """The written-keys line is trusted only while the hash line matches: a run's config.yaml copied
    and edited as a new config notes the keys edited to something that cannot act."""
    write_run_config(load_config(None, []), tmp_path)
    text = (tmp_path / "config.yaml").read_text()
    assert config_notes(load_config(tmp_path / "config.yaml")) == []
    edited = text.replace("overlong_penalty_factor: 1.0", "overlong_penalty_factor: 0.5")
    assert edited != text
    (tmp_path / "copy.yaml").write_text(edited)
    notes = config_notes(load_config(tmp_path / "copy.yaml"))
    assert [n for n in notes if n.startswith("algorithm.overlong_penalty_factor=0.5 has no effect")], notes
    assert len(notes) == 1, notes
