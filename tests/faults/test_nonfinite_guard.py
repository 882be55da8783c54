"""The non-finite guard end to end, through ``steadyrl.recipe.train`` and the CLI.

The real path first: a user reward of +-1e38 with no reward clip and a preset that does not
normalise (Dr. GRPO divides by nothing) gives advantages of ~1e38, whose loss or gradient norm
overflows. Such a step is skipped before the optimizer touches anything: the weights after it
equal the weights before it, ``health/skipped_steps`` counts it, a line names its offending
metrics and they are logged (non-finite values as ``null``). ``trainer.max_consecutive_skips``
skipped optimizer steps in a row stop the run with a one-line message (CLI exit status 1) and a
checkpoint of the last good state, from which ``--resume`` with a lower learning rate goes on.
Then: a NaN loss injected on chosen steps, what counts as "in a row", and a critic whose value
loss overflows.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from steadyrl import cli
from steadyrl.errors import TrainingHalted
from steadyrl.tracking import read_jsonl
from steadyrl.recipe import train
from steadyrl.trainer import update as update_module


def _steps(run_dir):
    """The raw lines of metrics.jsonl by step (``read_metrics`` would drop the nulls)."""
    return {m["step"]: m for m in read_jsonl(run_dir / "metrics.jsonl") if m["step"] > 0}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def _assert_finite(weights: dict) -> None:
    assert weights
    for name, value in weights.items():
        assert torch.isfinite(value).all(), name


def _guard_config(fault_config, reward, calls, **trainer):
    return fault_config(
        rewards=[reward("huge", calls=calls, value=1e38)],
        algorithm={"preset": "dr_grpo", "reward_clip": None},
        trainer={"max_steps": 4, "save_every": 1, "keep_checkpoints": 10, **trainer},
    )


def test_a_step_with_an_overflowing_gradient_is_skipped_counted_and_logged(
        fault_config, reward, checkpoint_weights, tmp_path, capsys):
    config = _guard_config(fault_config, reward, calls=[2])
    out = tmp_path / "run"
    summary = train(str(config), [], output_dir=str(out))
    assert summary["steps"] == 4 and summary["skipped_steps"] == 1
    printed = capsys.readouterr().out
    notes = [line for line in printed.splitlines() if "non-finite" in line]
    assert len(notes) == 1 and notes[0].startswith("steadyrl: step 2: skipped 1 optimizer step(s)")
    assert re.search(r"actor/grad_norm=(inf|nan)", notes[0]) and "reward/max=1e+38" in notes[0]

    steps = _steps(out)
    assert [steps[s]["health/skipped_steps"] for s in (1, 2, 3, 4)] == [0, 1, 1, 1]
    assert [steps[s]["health/warnings"] for s in (1, 2, 3, 4)] == [0, 1, 1, 1]
    poisoned = steps[2]
    assert poisoned["reward/max"] == pytest.approx(1e38, rel=1e-6)  # what caused it is in the log
    assert poisoned["actor/grad_norm"] is None  # inf, written as null: the offending metric is there
    for s in (1, 3, 4):
        assert math.isfinite(steps[s]["actor/grad_norm"]) and steps[s]["actor/grad_norm"] > 0

    ckpt = {s: checkpoint_weights(out / "checkpoints" / f"step_{s:06d}") for s in (1, 2, 3)}
    _assert_same(ckpt[2], ckpt[1])  # the skipped step left every weight as it was
    assert any(not torch.equal(ckpt[3][k], ckpt[2][k]) for k in ckpt[2])  # the next step trains
    _assert_finite(checkpoint_weights(out / "checkpoints" / "step_000004"))


def test_max_consecutive_skips_in_a_row_halt_with_the_last_good_state_saved(
        fault_config, reward, checkpoint_weights, tmp_path):
    config = _guard_config(fault_config, reward, calls=[2, 3, 4], max_consecutive_skips=2, max_steps=6)
    out = tmp_path / "run"
    with pytest.raises(TrainingHalted) as halted:
        train(str(config), [], output_dir=str(out))
    message = str(halted.value)
    assert "\n" not in message and "2 optimizer steps in a row" in message and "step 3" in message
    assert "step_000003" in message  # where the last good state is

    steps = _steps(out)
    assert sorted(steps) == [1, 2, 3]  # the halted step is logged, nothing after it
    assert [steps[s]["health/skipped_steps"] for s in (1, 2, 3)] == [0, 1, 2]
    halt = checkpoint_weights(out / "checkpoints" / "step_000003")
    _assert_finite(halt)
    _assert_same(halt, checkpoint_weights(out / "checkpoints" / "step_000001"))
    assert not (out / "summary.json").exists()


def test_the_cli_exits_1_with_a_one_line_message_when_training_halts(fault_config, reward, tmp_path, capsys):
    config = _guard_config(fault_config, reward, calls=[1, 2, 3], max_consecutive_skips=2, save_every=0)
    code = cli.main(["train", str(config), "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("steadyrl:")]
    assert len(lines) == 1 and lines[0].startswith("steadyrl: training stopped: 2 optimizer steps in a row")
    assert "Traceback" not in err
    assert (tmp_path / "run" / "checkpoints" / "step_000002").is_dir()


def test_a_nan_loss_on_chosen_steps_is_skipped_and_training_goes_on(
        fault_config, checkpoint_weights, monkeypatch, tmp_path):
    """A NaN loss (not only an overflowing gradient): the policy loss is made NaN on steps 2 and 4."""
    real = update_module.POLICY_LOSSES["ppo"]
    calls = []

    def nan_on_some_steps(*args, **kwargs):
        calls.append(1)
        loss, metrics = real(*args, **kwargs)
        return (loss * math.nan if len(calls) in (2, 4) else loss), metrics

    monkeypatch.setitem(update_module.POLICY_LOSSES, "ppo", nan_on_some_steps)
    config = fault_config(trainer={"max_steps": 5, "save_every": 1, "keep_checkpoints": 10,
                                   "max_consecutive_skips": 2})
    out = tmp_path / "run"
    summary = train(str(config), [], output_dir=str(out))
    assert len(calls) == 5 and summary["skipped_steps"] == 2  # two skips, never two in a row
    steps = _steps(out)
    assert [steps[s]["health/skipped_steps"] for s in range(1, 6)] == [0, 1, 1, 2, 2]
    assert steps[2]["actor/pg_loss"] is None and steps[4]["actor/loss"] is None
    ckpt = {s: checkpoint_weights(out / "checkpoints" / f"step_{s:06d}") for s in range(1, 6)}
    _assert_same(ckpt[2], ckpt[1])
    _assert_same(ckpt[4], ckpt[3])
    assert any(not torch.equal(ckpt[3][k], ckpt[2][k]) for k in ckpt[2])
    _assert_finite(ckpt[5])


def test_consecutive_skips_count_optimizer_steps_not_training_steps(fault_config, reward, tmp_path):
    """With two optimizer steps per training step (mini-batches of half the batch), two skipped
    optimizer steps in a row already happen within step 2: the run stops there, as
    trainer.max_consecutive_skips ('optimizer steps in a row') and the halt message say."""
    config = _guard_config(fault_config, reward, calls=[2, 3, 4], max_consecutive_skips=2, mini_batch_size=8)
    out = tmp_path / "run"
    with pytest.raises(TrainingHalted, match="last at step 2"):
        train(str(config), [], output_dir=str(out))
    steps = _steps(out)
    assert sorted(steps) == [1, 2] and steps[2]["health/skipped_steps"] == 2


def test_a_step_with_no_valid_sample_does_not_reset_the_run_of_skips(fault_config, reward, tmp_path):
    """Step 3 has nothing to train on (its reward failed): no optimizer step was tried, so the
    skips of steps 2 and 4 are still 'in a row' and the run stops at step 4."""
    config = fault_config(
        rewards=[reward("huge", calls=[2, 4, 5], value=1e38), reward("raises", calls=[3])],
        algorithm={"preset": "dr_grpo", "reward_clip": None},
        trainer={"max_steps": 6, "max_consecutive_skips": 2},
    )
    out = tmp_path / "run"
    with pytest.raises(TrainingHalted, match="last at step 4"):
        train(str(config), [], output_dir=str(out))
    steps = _steps(out)
    assert steps[3]["batch/no_valid_sample"] == 1 and steps[4]["health/skipped_steps"] == 2


def test_a_halted_run_resumes_with_the_lower_learning_rate_it_is_told_to_use(fault_config, reward, tmp_path):
    """The way out of a halt, as the message and docs/troubleshooting.md say: ``--resume`` with a
    lower ``optim.lr``. The checkpoint's optimizer and scheduler state must not override it."""
    config = _guard_config(fault_config, reward, calls=[2, 3], max_consecutive_skips=2, max_steps=6)
    out = tmp_path / "run"
    with pytest.raises(TrainingHalted, match="last at step 3"):
        train(str(config), [], output_dir=str(out))
    summary = train(str(config), ["optim.lr=2e-4", "trainer.max_steps=5"], output_dir=str(out), resume=True)
    assert summary["steps"] == 5 and summary["skipped_steps"] == 2
    steps = _steps(out)
    assert [steps[s]["actor/lr"] for s in (1, 2, 3)] == [1e-3] * 3
    assert [steps[s]["actor/lr"] for s in (4, 5)] == [2e-4] * 2
    assert all(math.isfinite(steps[s]["actor/grad_norm"]) for s in (4, 5))


def test_a_critic_whose_loss_overflows_is_counted_not_skipped_silently(
        fault_config, reward, checkpoint_weights, tiny_model_dir, tmp_path):
    """PPO on rewards of 1e20: the policy's advantages are whitened (finite), but the critic's
    value loss (V - R)^2 ~ 1e40 overflows float32. Its step used to be dropped without a count,
    so the run trained on for ever with a critic that never learned; now the optimizer step is
    skipped for both models, counted, and the run halts."""
    config = fault_config(rewards=[reward("huge", calls=[1, 2, 3, 4], value=1e20)],
                          algorithm={"preset": "ppo"}, trainer={"max_steps": 4, "max_consecutive_skips": 3})
    with pytest.raises(TrainingHalted, match="last at step 3"):
        train(str(config), [], output_dir=str(tmp_path / "run"))
    steps = _steps(tmp_path / "run")
    assert [steps[s]["health/skipped_steps"] for s in (1, 2, 3)] == [1, 2, 3]
    assert all(steps[s]["critic/grad_norm"] is None for s in (1, 2, 3))
    assert all(math.isfinite(steps[s]["actor/grad_norm"]) for s in (1, 2, 3))  # the policy alone was fine
    from safetensors.torch import load_file

    initial = load_file(tiny_model_dir / "model.safetensors")
    _assert_same(checkpoint_weights(tmp_path / "run" / "checkpoints" / "step_000003"), initial)  # nor moved
