"""The data-parallel pieces that need no second process: the layout checks (refused before any
model load, naming the field), the single-process identities, the optimizer-state formats that
make checkpoints loadable at any world size, and the vLLM engine's output conversion (with
stand-ins for vLLM's objects: vLLM itself needs a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from steadyrl import distributed as dist
from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.models import load_policy
from steadyrl.trainer.forward import PolicyLogprobs, as_logprob_module
from steadyrl.assembly.setup import check_parallel

CPU = torch.device("cpu")


def _config(*overrides):
    return load_config(None, ["trainer.device=cpu", *overrides])


@pytest.mark.parametrize("overrides, world, field", [
    (["rollout.prompts_per_step=3"], 2, "rollout.prompts_per_step = 3"),
    (["rollout.prompts_per_step=8", "trainer.mini_batch_size=6"], 4, "trainer.mini_batch_size = 6"),
    (["trainer.parallel=fsdp"], 1, "trainer.parallel = 'fsdp' needs CUDA"),
    (["trainer.parallel=fsdp"], 2, "trainer.parallel = 'fsdp' needs CUDA"),
    (["rollout.engine=vllm", "model.lora.enabled=true", "model.name_or_path=x", "data.train_path=y"], 1,
     "rollout.engine = 'vllm' with model.lora.enabled"),
])
def test_a_layout_that_cannot_work_is_a_config_error_naming_the_field(overrides, world, field):
    with pytest.raises(ConfigError, match=field.replace("(", r"\(").replace(")", r"\)")):
        check_parallel(_config(*overrides), CPU, world)


def test_the_error_suggests_the_next_multiple():
    with pytest.raises(ConfigError, match=r"multiple of the world size \(e.g. 8\)"):
        check_parallel(_config("rollout.prompts_per_step=6"), CPU, 4)


@pytest.mark.parametrize("overrides", [["model.lora.enabled=true"], ["algorithm.preset=ppo"]])
def test_fsdp_refuses_lora_and_critic_on_a_gpu_too(overrides):
    gpu = torch.device("cuda", 0)  # only its type is read
    with pytest.raises(ConfigError, match="trainer.parallel = 'fsdp' with"):
        check_parallel(_config("trainer.parallel=fsdp", "model.name_or_path=x", "data.train_path=y", *overrides),
                       gpu, 2)


def test_a_layout_that_splits_evenly_is_accepted():
    check_parallel(_config("rollout.prompts_per_step=8", "trainer.mini_batch_size=16"), CPU, 4)
    check_parallel(_config("rollout.prompts_per_step=3"), CPU, 1)


def test_in_one_process_the_collectives_are_identities(tiny_model_dir):
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    assert dist.all_reduce_sum(torch.tensor(2.5)) == 2.5 and dist.gather_objects({"a": 1}) == [{"a": 1}]
    assert dist.shard([1, 2, 3]) == [1, 2, 3]
    assert dist.init_from_env(use_cuda=False) is False  # not launched by torchrun: nothing started
    policy = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    module = PolicyLogprobs(policy)
    assert dist.wrap_model(module, "ddp", CPU, layers_of=policy) is module
    assert as_logprob_module(module) is module and isinstance(as_logprob_module(policy), PolicyLogprobs)
    with dist.no_sync(module):
        pass
    assert not dist.is_fsdp(module) and not dist.is_ddp(module)


def test_decoder_layers_are_found_for_fsdp(tiny_model_dir):
    policy = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    layers = dist.decoder_layers(policy)
    assert len(layers) == policy.config.num_hidden_layers
    assert all(type(layer).__name__ == "LlamaDecoderLayer" for layer in layers)


def test_optimizer_state_by_name_converts_to_torchs_own_format_and_back(tiny_model_dir):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    policy = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    policy.model.embed_tokens.weight.requires_grad_(False)  # a frozen parameter shifts the positions
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    policy(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    named = get_optimizer_state_dict(policy, opt, options=StateDictOptions(full_state_dict=True))
    names = dist._trainable_names(policy)
    as_indices = dist.optimizer_state_to_indices(named, names)
    own = opt.state_dict()
    assert as_indices["param_groups"] == own["param_groups"]
    assert own["state"].keys() == as_indices["state"].keys()
    for i, slot in own["state"].items():
        for key, value in slot.items():
            assert torch.equal(as_indices["state"][i][key], value), (i, key)
    back = dist.optimizer_state_to_names(as_indices, names)
    assert back["param_groups"] == named["param_groups"] and back["state"].keys() == named["state"].keys()
    assert dist.full_optimizer_state_dict(policy, opt) is not None  # plain model: its own state dict
    assert dist.full_model_state_dict(policy) is None


# --- vLLM output conversion (no vLLM needed) ----------------------------------------------------

def _completion(index, tokens, logprobs, finish):
    steps = None if logprobs is None else [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(tokens, logprobs)]
    return SimpleNamespace(index=index, token_ids=tokens, logprobs=steps, finish_reason=finish)


def test_vllm_outputs_become_a_generation():
    from steadyrl.rollout.vllm import generation_from_outputs

    eos, pad = 2, 0
    outputs = [
        SimpleNamespace(outputs=[_completion(1, [7, 8, 9], [-0.1, -0.2, -0.3], "length"),  # out of order
                                 _completion(0, [5, eos], [-1.0, -0.5], "stop")]),
        SimpleNamespace(outputs=[_completion(0, [6], [-2.0], "stop"),  # stopped, EOS not in token_ids
                                 _completion(1, [4, 4, eos], [-0.7, -0.8, -0.9], "stop")]),
    ]
    gen = generation_from_outputs(outputs, [[11, 12], [13]], 2, pad_id=pad, eos_ids=[eos], max_new_tokens=3,
                                  decode=lambda ids: ",".join(map(str, ids)))
    assert gen.response_ids.tolist() == [[5, eos, 0], [7, 8, 9], [6, 0, 0], [4, 4, eos]]
    assert gen.response_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]
    assert gen.truncated.tolist() == [False, True, False, False]
    torch.testing.assert_close(gen.rollout_logprobs, torch.tensor(
        [[-1.0, -0.5, 0.0], [-0.1, -0.2, -0.3], [-2.0, 0.0, 0.0], [-0.7, -0.8, -0.9]]))
    assert gen.prompt_ids.tolist() == [[11, 12], [11, 12], [0, 13], [0, 13]]
    assert gen.prompt_mask.tolist() == [[1, 1], [1, 1], [0, 1], [0, 1]]
    assert gen.completions == ["5,2", "7,8,9", "6", "4,4,2"]


def test_vllm_outputs_without_logprobs_give_none():
    from steadyrl.rollout.vllm import generation_from_outputs

    outputs = [SimpleNamespace(outputs=[_completion(0, [5, 2], None, "stop")])]
    gen = generation_from_outputs(outputs, [[1]], 1, pad_id=0, eos_ids=[2], max_new_tokens=4, decode=str)
    assert gen.rollout_logprobs is None and gen.response_mask.tolist() == [[1, 1]]


def test_the_vllm_engine_module_imports_without_vllm_and_refuses_clearly():
    import importlib.util

    from steadyrl.rollout import vllm as vllm_engine

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    with pytest.raises(ConfigError, match="rollout.engine = 'vllm' needs the vllm extra"):
        vllm_engine.VLLMEngine(None, None, load_config(None, []).rollout)


def test_options_an_older_vllm_does_not_know_are_dropped_one_by_one():
    from steadyrl.rollout.vllm import _build_llm

    class OldLLM:
        def __init__(self, model, **options):
            for name in ("logprobs_mode", "generation_config"):
                if name in options:
                    raise TypeError(f"__init__() got an unexpected keyword argument '{name}'")
            self.options = options

    llm, processed = _build_llm(OldLLM, {"model": "m", "logprobs_mode": "processed_logprobs",
                                         "generation_config": "vllm", "enable_sleep_mode": True})
    assert llm.options == {"enable_sleep_mode": True} and processed is False
    with pytest.raises(TypeError, match="seed"):
        _build_llm(lambda model, **o: (_ for _ in ()).throw(TypeError("unexpected keyword argument 'seed'")),
                   {"model": "m", "seed": 1})
