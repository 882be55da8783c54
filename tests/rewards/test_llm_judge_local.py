"""``llm_judge`` with ``backend: local``: a tiny GPT-2 built here whose greedy output is always the
digit 7 (its final layer norm zeroed, its bias pointing at that token's embedding), so the judge's
reply and score are known: generation, parsing and the checks made before any weights load."""

import pytest
import torch

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardSpec, load_reward


@pytest.fixture(scope="module")
def sevens(tmp_path_factory):
    import support
    from transformers import GPT2Config, GPT2LMHeadModel

    from tokenizers import decoders

    tok = support.char_tokenizer()
    tok.backend_tokenizer.decoder = decoders.Fuse()  # "777", not "7 7 7"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=512,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id))
    seven = tok.convert_tokens_to_ids("7")
    with torch.no_grad():
        direction = torch.randn(16)
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(direction)
        model.transformer.wte.weight[seven] = 10 * direction  # tied: the LM head's row of "7"
    directory = tmp_path_factory.mktemp("judge")
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def local_judge(directory, **options):
    return load_reward("llm_judge", backend="local", model=str(directory), device="cpu",
                       template="Q {prompt} A {completion} G {answer}. Score:", **options)


def test_local_judge_generates_greedily_and_parses_the_score(sevens):
    fn = local_judge(sevens, max_new_tokens=1, batch_size=2)
    assert fn(["a", "bb", "ccc"], ["x", "y", "z"], answer=["1", "2", "3"]) == [0.7, 0.7, 0.7]
    assert not fn.model.training and not any(p.requires_grad for p in fn.model.parameters())
    assert fn.metrics()["cache_hit_rate"] == 0.0


def test_local_judge_counts_unparsable_and_out_of_range_replies(sevens):
    fn = local_judge(sevens, max_new_tokens=3)  # "777"
    assert fn(["a", "b"], ["x", "y"], answer=["1", None]) == [None, None]
    report = fn.metrics()
    assert report["failures/no_answer"] == 1.0 and report["failures/out_of_range"] == 1.0
    raw = local_judge(sevens, max_new_tokens=3, scale=False, max_score=1000)
    assert raw(["a"], ["x"], answer=["1"]) == [777.0]


def test_local_judge_runs_inline_on_the_trainer_device(sevens):
    spec = RewardSpec.load("llm_judge", backend="local", model=str(sevens))
    assert spec.isolation == "inline"
    spec.fn.use_device(torch.device("cpu"), torch.float32)
    assert spec.fn.device == torch.device("cpu") and spec.fn.dtype == torch.float32


def test_local_judge_refuses_a_model_that_is_not_a_causal_lm_or_http_options(sevens, tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ConfigError, match="not a causal language model"):
        load_reward("llm_judge", backend="local", model=str(tmp_path))
    with pytest.raises(ConfigError, match="base_url and api_key_env go with backend 'openai'"):
        load_reward("llm_judge", backend="local", model=str(sevens), base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="no such directory"):
        load_reward("llm_judge", backend="local", model=str(tmp_path / "missing"))
