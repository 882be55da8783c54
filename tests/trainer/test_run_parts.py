"""The build step's shape: one task, a user's or the demo's, chosen in one place and called
through the same hooks; a Run of a few parts whose attributes still read on the run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from steadyrl.build.setup import Run, RunModels, RunOptim, RunTask
from steadyrl.build.task import DataTask, task_of
from steadyrl.config import load_config
from steadyrl.build.demo import DemoTask


def test_a_config_without_data_is_the_demos_task_and_with_data_the_users(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    assert isinstance(task_of(load_config(None, [])), DemoTask)
    user = load_config(None, [f"data.train_path={data}", "model.name_or_path=some/model"])
    assert isinstance(task_of(user), DataTask)


def test_the_demo_resumes_only_with_its_own_settings_and_a_users_task_adds_none():
    assert DemoTask.resume_keys == ("demo",)
    assert DataTask.resume_keys == ()


def _run() -> Run:
    policy = torch.nn.Linear(2, 2)
    models = RunModels(tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=1), policy=policy, reference=None,
                       critic=None, generator=policy)
    task = RunTask(scorer="scorer", train_prompts=["p"], eval_prompts=["e"], sampler="sampler")
    optim = RunOptim(optimizer="opt", critic_optimizer=None, scheduler="sched", kl_controller="kl", running="rm")
    return Run(config=load_config(None, []), output_dir=Path("out"), device=torch.device("cpu"), models=models,
               task=task, optim=optim, total_steps=3)


def test_a_runs_parts_read_and_write_through_their_old_names():
    run = _run()
    assert run.policy is run.models.policy and run.generator is run.models.policy
    assert (run.scorer, run.sampler, run.eval_prompts, run.agent) == ("scorer", "sampler", ["e"], None)
    assert (run.optimizer, run.scheduler, run.kl_controller, run.running) == ("opt", "sched", "kl", "rm")
    assert run.training_models() == (run.models.policy, None)
    run.show = print
    assert run.task.show is print
    run.optimizer = "other"
    assert run.optim.optimizer == "other"

