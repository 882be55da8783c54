"""The build step's shape: one task, a user's or the demo's, chosen in one place and called
through the same hooks; a Run of a few typed parts, read through the parts (nothing forwarded)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from steadyrl.trainer.parts import Run, RunModels, RunOptim, RunTask
from steadyrl.assembly.task import DataTask, task_of
from steadyrl.config import load_config
from steadyrl.assembly.demo import DemoTask


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


def test_a_runs_parts_are_read_through_the_parts():
    run = _run()
    assert run.models.generator is run.models.policy
    assert (run.task.scorer, run.task.sampler, run.task.eval_prompts, run.task.agent) == ("scorer", "sampler", ["e"], None)
    assert (run.optim.optimizer, run.optim.scheduler, run.optim.kl_controller) == ("opt", "sched", "kl")
    assert run.models.training_models() == (run.models.policy, None)


def test_a_run_has_under_ten_names_and_forwards_none_of_its_parts():
    run = _run()
    names = [n for n in vars(type(run)) if not n.startswith("_")] + list(vars(run))
    assert sorted(set(names)) == ["config", "device", "models", "optim", "output_dir", "rollouts", "state", "task",
                                  "total_steps"]
    for part in ("policy", "scorer", "optimizer", "tokenizer", "agent"):
        assert not hasattr(run, part)


def test_the_episode_driver_is_chosen_once_when_the_task_is_built():
    from steadyrl.agents.protocol import AgentBase
    from steadyrl.rollout.driver import TurnDriver

    class Driving(AgentBase):
        drives_episodes = True

        def rollout(self, engine, tokenizer, prompts, n, limits, *, seeds=None, **sampling):
            return ("driven", len(prompts), n)

    plain, turns, driving = AgentBase(), RunTask("s", [], [], "x"), Driving()
    assert turns.driver == TurnDriver(None)
    assert RunTask("s", [], [], "x", agent=plain).driver == TurnDriver(plain)
    task = RunTask("s", [], [], "x", agent=driving)
    assert task.driver == driving.rollout
    driving.drives_episodes = False  # read once, at build time: a later change does not re-choose
    from steadyrl.rollout.driver import rollout

    assert rollout(None, None, task.driver, ["p"], 2, load_config(None, []).rollout) == ("driven", 1, 2)


def test_the_tasks_model_hooks_return_the_prompts_and_fill_in_nothing(tmp_path, monkeypatch):
    import contextlib
    import dataclasses
    import json

    import yaml

    import support
    from steadyrl.assembly import setup
    from steadyrl.assembly.prompts import Prompts
    from steadyrl.demo.task import make_splits

    model = support.build_tiny_lm(tmp_path / "model")
    train, _ = make_splits(8, 2, min_len=3, max_len=4, seed=0)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "model": {"name_or_path": str(model)}, "data": {"train_path": str(tmp_path / "train.jsonl")},
        "rollout": {"max_new_tokens": 8}, "trainer": {"device": "cpu"}}))
    config = load_config(str(tmp_path / "config.yaml"), [])
    with contextlib.ExitStack() as resources:
        inputs = setup.check_inputs(config, resources)
        before = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)}
        prompts = inputs.task.check_model(config, inputs)  # a second call: returns, changes nothing
        assert isinstance(prompts, Prompts) and prompts.model_path == str(model)
        assert len(prompts.train_prompts) == len(inputs.prompts.train_prompts) == 8 and prompts.agent is None
        assert all(getattr(inputs, name) is value for name, value in before.items())
        assert inputs.task.model(config, tmp_path / "run", inputs) is inputs.prompts
