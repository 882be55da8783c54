"""``rollout.hf_cache: static`` (transformers' preallocated KV cache) samples exactly the token ids
of the default dynamic cache, with and without prompt-prefix sharing on the dynamic side."""

import pytest
import torch

from steadyrl.config import load_config
from steadyrl.errors import ConfigError
from steadyrl.models import load_policy, load_tokenizer
from steadyrl.rollout import HFEngine, build_engine

CPU = torch.device("cpu")
PROMPTS = ["abc=", "hgfed=", "ab=", "cdcd="]


@pytest.mark.parametrize("share_prefix", [False, True])
@pytest.mark.parametrize("do_sample", [True, False])
def test_static_cache_gives_the_dynamic_cache_token_ids(tiny_model_dir, share_prefix, do_sample):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    outs = []
    for cache in ("dynamic", "static"):
        torch.manual_seed(3)
        engine = HFEngine(model, tokenizer, share_prefix=share_prefix, cache=cache)
        outs.append(engine.generate(ids, 3 if do_sample else 1, max_new_tokens=8, temperature=0.9,
                                    do_sample=do_sample))
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    assert torch.equal(outs[0].response_mask, outs[1].response_mask)
    assert outs[0].completions == outs[1].completions


def test_the_config_key_reaches_the_engine_and_bad_values_name_it(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    cfg = load_config(None, ["rollout.hf_cache=static"])
    assert build_engine("hf", model, tokenizer, cfg.rollout).cache == "static"
    assert build_engine("hf", model, tokenizer, load_config(None, []).rollout).cache == "dynamic"
    with pytest.raises(ConfigError, match=r"rollout\.hf_cache.*'paged'"):
        load_config(None, ["rollout.hf_cache=paged"])
