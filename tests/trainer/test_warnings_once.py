"""A run prints each distinct Python warning once and counts it (run/warnings_once.py), even when
code in between opens its own ``warnings.catch_warnings()`` block, which resets Python's memory of
what it has shown."""

from __future__ import annotations

import warnings

import torch

from steadyrl.run.warnings_once import warnings_once

torch.set_num_threads(1)


def _warn_in_own_block(text: str) -> None:
    with warnings.catch_warnings():  # what a per-step block did: Python forgets what it showed
        warnings.simplefilter("default")
        warnings.warn(text, FutureWarning, stacklevel=1)


def _printed(monkeypatch) -> list[str]:
    """What reaches ``warnings.showwarning`` (pytest records warnings with its own)."""
    printed: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kw: printed.append(str(message)))
    return printed


def test_same_warning_in_several_steps_is_printed_once_and_counted_once(monkeypatch):
    printed = _printed(monkeypatch)
    counted: list[str] = []
    with warnings_once() as seen:
        for _ in range(3):
            _warn_in_own_block("`past_key_values` is deprecated")
        assert seen.take(counted) == 1
        _warn_in_own_block("another notice")
        _warn_in_own_block("`past_key_values` is deprecated")
        assert seen.take(counted) == 1
        assert seen.take(counted) == 0
    assert len(counted) == 2
    err = "\n".join(printed)
    assert err.count("`past_key_values` is deprecated") == 1
    assert err.count("another notice") == 1
    assert "shows each warning once per run" in err


def test_the_schedules_note_about_skipped_optimizer_steps_is_not_printed(monkeypatch):
    printed = _printed(monkeypatch)
    with warnings_once() as seen:
        warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`.", UserWarning,
                      stacklevel=1)
        assert seen.take([]) == 0
    assert not printed


def test_warnings_are_shown_as_before_after_the_run():
    show = warnings.showwarning
    with warnings_once():
        pass
    assert warnings.showwarning is show


def test_a_resumed_run_does_not_count_again_what_the_run_counted_before_it_stopped(monkeypatch):
    """health/warnings is cumulative and carried by checkpoints: a resumed run prints the warning
    again (a new process) but its count equals the uninterrupted run's (exact resume)."""
    _printed(monkeypatch)
    counted: list[str] = []
    with warnings_once() as seen:  # the run before it stopped
        _warn_in_own_block("`past_key_values` is deprecated")
        assert seen.take(counted) == 1
    with warnings_once() as seen:  # the resumed run, with the checkpoint's list
        _warn_in_own_block("`past_key_values` is deprecated")
        _warn_in_own_block("a new notice")
        assert seen.take(counted) == 1


def test_peft_asking_for_the_old_checkpointing_name_is_not_printed(monkeypatch):
    """Issue 33: every LoRA run with gradient checkpointing printed transformers 5's FutureWarning
    about the name peft uses; steadyrl itself calls activation_checkpointing_enable."""
    printed = _printed(monkeypatch)
    with warnings_once() as seen:
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6. Use "
                      "`is_activation_checkpointing` instead.", FutureWarning, stacklevel=1)
        assert seen.take([]) == 0
    assert not printed


def test_building_a_policy_with_gradient_checkpointing_warns_nothing(tiny_model_dir):
    from steadyrl.assembly.setup import build_models
    from steadyrl.config import load_config

    config = load_config(None, [f"model.name_or_path={tiny_model_dir}", "model.gradient_checkpointing=true",
                                "data.train_path=x.jsonl"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = build_models(config, str(tiny_model_dir), torch.device("cpu"))[0]
    assert policy.is_activation_checkpointing
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
