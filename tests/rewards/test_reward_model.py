"""The ``reward_model`` built-in with a tiny LlamaForSequenceClassification built and saved here:
its scores are the model's logits of the right rows, batching and padding do not change them,
normalisation, frozen eval mode, the chat template, and the checks made before any weights load."""

import math

import pytest
import torch

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardScorer, RewardSpec, load_reward

PROMPTS = ["2+2=", "capital of France?", "2+2=", "say hi"]
COMPLETIONS = ["4", "Paris, of course.", "5", "hi there, friend"]


def build_classifier(directory, *, num_labels=1, chat_template=None, seed=0):
    import support
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = support.char_tokenizer()
    if chat_template:
        tok.chat_template = chat_template
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         num_labels=num_labels, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id)
    model = LlamaForSequenceClassification(config)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return build_classifier(tmp_path_factory.mktemp("rm"))


@pytest.fixture(scope="module")
def three_logits(tmp_path_factory):
    return build_classifier(tmp_path_factory.mktemp("rm3"), num_labels=3, seed=1)


def reference_logits(directory, texts, *, label=0, add_special_tokens=True):
    """Each text scored alone (no padding), straight through transformers."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForSequenceClassification.from_pretrained(directory, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for t in texts:
            ids = tok(t, add_special_tokens=add_special_tokens)["input_ids"]
            out.append(model(input_ids=torch.tensor([ids])).logits[0, label].item())
    return out


def test_scores_are_the_model_s_logits_of_the_right_rows(classifier):
    fn = load_reward("reward_model", model=str(classifier), device="cpu", batch_size=4)
    scores = fn(PROMPTS, COMPLETIONS)
    expected = reference_logits(classifier, [p + c for p, c in zip(PROMPTS, COMPLETIONS)])
    assert scores == pytest.approx(expected, abs=1e-5)
    assert len(set(round(s, 6) for s in scores)) == 4  # the rows differ: a mix-up would show


def test_batching_and_padding_do_not_change_the_scores(classifier):
    one = load_reward("reward_model", model=str(classifier), device="cpu", batch_size=1, cache_size=0)
    three = load_reward("reward_model", model=str(classifier), device="cpu", batch_size=3, cache_size=0)
    assert three(PROMPTS, COMPLETIONS) == pytest.approx(one(PROMPTS, COMPLETIONS), abs=1e-5)
    reordered = three(PROMPTS[::-1], COMPLETIONS[::-1])[::-1]
    assert reordered == pytest.approx(one(PROMPTS, COMPLETIONS), abs=1e-5)


def test_label_index_picks_one_logit_of_a_multi_logit_head(three_logits):
    with pytest.raises(ConfigError, match="3 logits; set the option label_index"):
        load_reward("reward_model", model=str(three_logits))
    with pytest.raises(ConfigError, match="label_index=3 is out of range"):
        load_reward("reward_model", model=str(three_logits), label_index=3)
    fn = load_reward("reward_model", model=str(three_logits), label_index=2, device="cpu")
    texts = [p + c for p, c in zip(PROMPTS, COMPLETIONS)]
    assert fn(PROMPTS, COMPLETIONS) == pytest.approx(reference_logits(three_logits, texts, label=2), abs=1e-5)


def test_batch_normalisation_is_a_z_score_over_the_batch(classifier):
    raw = load_reward("reward_model", model=str(classifier), device="cpu")(PROMPTS, COMPLETIONS)
    fn = load_reward("reward_model", model=str(classifier), device="cpu", normalize="batch")
    normed = fn(PROMPTS, COMPLETIONS)
    mean = sum(raw) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in raw) / 4)
    assert normed == pytest.approx([(x - mean) / (std + 1e-6) for x in raw], abs=1e-5)
    assert sum(normed) == pytest.approx(0.0, abs=1e-5)
    # cached samples are normalised with the new ones: a batch of one repeated sample scores 0
    assert fn(PROMPTS[:1] * 2, COMPLETIONS[:1] * 2) == [0.0, 0.0]


def test_fixed_normalisation_uses_the_given_mean_and_std(classifier):
    raw = load_reward("reward_model", model=str(classifier), device="cpu")(PROMPTS, COMPLETIONS)
    fixed = load_reward("reward_model", model=str(classifier), device="cpu", normalize="fixed", mean=0.5, std=2.0)
    assert fixed(PROMPTS, COMPLETIONS) == pytest.approx([(x - 0.5) / 2.0 for x in raw], abs=1e-6)
    with pytest.raises(ConfigError, match="needs the options mean and std"):
        load_reward("reward_model", model=str(classifier), normalize="fixed", mean=0.5)
    with pytest.raises(ConfigError, match="go with normalize='fixed'"):
        load_reward("reward_model", model=str(classifier), std=2.0)
    with pytest.raises(ConfigError, match="normalize='zscore': Input should be 'none', 'batch' or 'fixed'"):
        load_reward("reward_model", model=str(classifier), normalize="zscore")


def test_the_model_is_loaded_once_frozen_in_eval_mode_and_run_without_grad(classifier, monkeypatch):
    from transformers import AutoModelForSequenceClassification

    loads, grad_modes = [], []
    original = AutoModelForSequenceClassification.from_pretrained
    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained",
                        lambda *a, **k: loads.append(a[0]) or original(*a, **k))
    fn = load_reward("reward_model", model=str(classifier), device="cpu")
    assert loads == [] and fn.model is None  # lazy: nothing loaded when the reward is built
    fn(PROMPTS[:2], COMPLETIONS[:2])
    fn.model.register_forward_hook(lambda *a: grad_modes.append(torch.is_grad_enabled()))
    fn(PROMPTS[2:], COMPLETIONS[2:])
    assert len(loads) == 1 and grad_modes == [False]
    assert not fn.model.training and all(not m.training for m in fn.model.modules())
    assert not any(p.requires_grad for p in fn.model.parameters())


def test_the_chat_template_renders_prompt_and_completion(tmp_path):
    template = "{% for m in messages %}{{ '<' + m.role + '>' + m.content + '\\n' }}{% endfor %}"
    directory = build_classifier(tmp_path / "chat", chat_template=template)
    fn = load_reward("reward_model", model=str(directory), device="cpu")
    chat_prompt = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    scores = fn(["2+2=", chat_prompt], ["4", [{"role": "assistant", "content": "hello"}]])
    texts = ["<user>2+2=\n<assistant>4\n", "<system>be brief\n<user>hi\n<assistant>hello\n"]
    assert fn.texts(["2+2=", chat_prompt], ["4", "hello"]) == (texts, True)
    # the template's text is tokenized as it is: no BOS added on top of the template
    assert scores == pytest.approx(reference_logits(directory, texts, add_special_tokens=False), abs=1e-5)
    plain = load_reward("reward_model", model=str(directory), device="cpu", chat_template=False)
    assert plain(["2+2="], ["4"]) == pytest.approx(reference_logits(directory, ["2+2=4"]), abs=1e-5)
    assert plain.texts(["2+2="], ["4"]) == (["2+2=4"], False)


def test_max_length_cuts_from_the_left_keeping_the_completion(classifier):
    fn = load_reward("reward_model", model=str(classifier), device="cpu", max_length=8, batch_size=2)
    scores = fn(["a long prompt that will be cut ", "p"], ["END", "q"])
    # the tokenizer cuts the text and then adds its special tokens: BOS + the last 7 characters
    expected = reference_logits(classifier, ["<s>cut END"], add_special_tokens=False)
    assert scores[0] == pytest.approx(expected[0], abs=1e-5)
    assert scores[1] == pytest.approx(reference_logits(classifier, ["pq"])[0], abs=1e-5)


def test_texts_longer_than_the_model_s_positions_are_cut_by_default(classifier):
    fn = load_reward("reward_model", model=str(classifier), device="cpu")  # 128 positions
    long = "x" * 300 + "END"
    score = fn([long], ["!"])
    assert fn.max_length == 128
    expected = reference_logits(classifier, ["<s>" + (long + "!")[-127:]], add_special_tokens=False)
    assert score == pytest.approx(expected, abs=1e-5)


def test_not_a_sequence_classifier_is_refused_before_any_weights_load(tiny_model_dir, monkeypatch):
    from transformers import AutoModelForSequenceClassification

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(ConfigError, match=r"not a sequence classifier .*LlamaForCausalLM"):
        load_reward("reward_model", model=str(tiny_model_dir))


def test_bad_paths_and_options_are_refused_naming_the_option(classifier, tmp_path):
    with pytest.raises(ConfigError, match="option model = .*no_such_dir"):
        load_reward("reward_model", model=str(tmp_path / "no_such_dir"))
    with pytest.raises(ConfigError, match="lable_index=0: unknown option.*did you mean 'label_index'"):
        load_reward("reward_model", model=str(classifier), lable_index=0)
    with pytest.raises(ConfigError, match="batch_size=0"):
        load_reward("reward_model", model=str(classifier), batch_size=0)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device='cuda' but no CUDA device is available"):
            load_reward("reward_model", model=str(classifier), device="cuda")
    with pytest.raises(ConfigError, match="dtype='fp8'"):
        load_reward("reward_model", model=str(classifier), dtype="fp8")


def test_the_reward_model_follows_the_trainer_device_and_dtype(classifier):
    fn = load_reward("reward_model", model=str(classifier))
    fn.use_device(torch.device("cpu"), torch.bfloat16)
    assert fn.device == torch.device("cpu") and fn.dtype == torch.bfloat16
    fn(PROMPTS[:1], COMPLETIONS[:1])
    assert next(fn.model.parameters()).dtype == torch.bfloat16
    own = load_reward("reward_model", model=str(classifier), dtype="float32")
    own.use_device(torch.device("cpu"), torch.bfloat16)
    assert own.dtype == torch.float32


def test_scored_inline_by_default_with_metrics_and_refused_in_a_forked_cuda_worker(classifier, monkeypatch):
    spec = RewardSpec.load("reward_model", model=str(classifier), device="cpu")
    assert spec.isolation == "inline"
    with RewardScorer([spec]) as scorer:
        result = scorer.score(PROMPTS + PROMPTS[:2], COMPLETIONS + COMPLETIONS[:2])
    assert result.metrics["reward/reward_model/cache_hit_rate"] == pytest.approx(2 / 6)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = load_reward("reward_model", model=str(classifier), device="cuda")
    monkeypatch.setattr(cuda, "_pid", -1)  # as if called in a process forked from the trainer
    with pytest.raises(RuntimeError, match="forked worker process, which cannot use CUDA"):
        cuda(PROMPTS[:1], COMPLETIONS[:1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_reward_model_runs_in_the_trainer_dtype_inline_and_in_a_thread(classifier):
    on_cpu = load_reward("reward_model", model=str(classifier), device="cpu")(PROMPTS, COMPLETIONS)
    for isolation in ("inline", "thread"):
        fn = load_reward("reward_model", model=str(classifier))
        fn.use_device(torch.device("cuda"), torch.bfloat16)
        with RewardScorer([RewardSpec("rm", fn, isolation=isolation)]) as scorer:
            result = scorer.score(PROMPTS, COMPLETIONS)
        parameter = next(fn.model.parameters())
        assert parameter.device.type == "cuda" and parameter.dtype == torch.bfloat16
        assert result.raw["rm"] == pytest.approx(on_cpu, abs=0.05)
