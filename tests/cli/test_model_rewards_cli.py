"""``steadyrl train`` with rewards from models and servers: a run scored by a reward model and a
reward server started here logs their metrics, and each bad input exits 2 with one line naming the
option before any model weights load."""

from __future__ import annotations

import pytest
import torch
import transformers
from support_http import ScriptedServer, chat_reply, free_port

from steadyrl import cli


def build_classifier(directory):
    import support
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = support.char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return build_classifier(tmp_path_factory.mktemp("reward_model"))


def test_a_run_scored_by_a_reward_model_and_a_reward_server_logs_their_metrics(tiny_run, classifier, tmp_path):
    from steadyrl.tracking import read_metrics

    def respond(n, path, body):
        if path == "/v1/chat/completions":
            return 200, chat_reply("Score: 5")
        return 200, {"scores": [float(len(c)) for c in body["completions"]]}

    out = tmp_path / "run"
    with ScriptedServer(respond, max_requests=300) as server:
        rewards = (f"rewards=[{{name: reward_model, options: {{model: '{classifier}', normalize: batch}}}}, "
                   f"{{name: http, weight: 0.1, options: {{url: '{server.url}/score', batch_size: 8}}}}, "
                   f"{{name: llm_judge, weight: 0.1, options: {{base_url: '{server.url}/v1', model: j}}}}]")
        code = cli.main(["train", str(tiny_run.config), "--output-dir", str(out), rewards, "trainer.max_steps=1"])
        requests = list(server.requests)
    assert code == 0
    step = [m for m in read_metrics(out) if m["step"] == 1][0]
    assert step["reward/reward_model/failed"] == 0 and step["reward/http/failed"] == 0
    assert step["reward/llm_judge/failed"] == 0 and step["reward/llm_judge/mean"] == 0.5
    assert abs(step["reward/reward_model/mean"]) < 1e-5  # batch z-scores average to 0
    for name in ("reward_model", "http", "llm_judge"):
        assert 0 <= step[f"reward/{name}/cache_hit_rate"] < 1 and step[f"reward/{name}/time_s"] > 0
    # the held-out evaluations before and after training score through the same reward objects
    batches = [body for path, body, _ in requests if path == "/score"]
    samples = [s for body in batches for s in zip(body["prompts"], body["completions"])]
    assert 0 < len(batches) < 20 and len(set(samples)) == len(samples)  # each sample sent once
    assert {"prompts", "completions", "answer"} <= set(batches[0])
    judged = [body["messages"][-1]["content"] for path, body, _ in requests if path != "/score"]
    assert len(judged) == len(samples) == len(set(judged))  # the judge too saw each sample once


CASES = {
    "judge URL that is unreachable": (
        "rewards=[{name: llm_judge, options: {base_url: 'http://127.0.0.1:PORT/v1', model: judge}}]",
        ("rewards[0]: llm_judge reward", "option base_url", "cannot connect")),
    "judge URL without a scheme": (
        "rewards=[{name: math}, {name: llm_judge, options: {base_url: '127.0.0.1:PORT/v1', model: judge}}]",
        ("invalid configuration: rewards[1].options.base_url = '127.0.0.1:", "valid: an http:// or https://")),
    "reward server URL with another scheme": (
        "rewards=[{name: http, options: {url: 'ftp://127.0.0.1:PORT/score', check_url: false}}]",
        ("invalid configuration: rewards[0].options.url = 'ftp://127.0.0.1:", "its scheme is 'ftp'",
         "valid: an http:// or https://")),
    "reward server URL from the environment that is not a URL": (
        "rewards=[{name: http, options: {url: {env: STEADYRL_TEST_URL}}}]",
        ("rewards[0]: http reward: option url = 'not a url'", "valid: an http:// or https://")),
    "judge option out of range in the second entry": (
        "rewards=[{name: math}, {name: llm_judge, options: {base_url: 'http://127.0.0.1:PORT/v1', model: judge, "
        "max_score: -1, check_url: false}}]", ("invalid configuration: rewards[1].options", "max_score=-1", "greater than")),
    "judge API-key variable that is not set": (
        "rewards=[{name: llm_judge, options: {base_url: 'http://127.0.0.1:PORT/v1', model: judge, "
        "api_key_env: STEADYRL_TEST_UNSET_KEY}}]", ("api_key_env", "STEADYRL_TEST_UNSET_KEY", "not set")),
    "reward server URL that is unreachable": (
        "rewards=[{name: http, options: {url: 'http://127.0.0.1:PORT/score'}}]", ("rewards[0]: http reward", "option url")),
    "reward server option of the wrong type": (
        "rewards=[{name: http, options: {url: 'http://127.0.0.1:PORT/score', check_url: false, batch_size: many}}]",
        ("invalid configuration: rewards[0].options.batch_size = 'many'", "a valid integer")),
    "reward model that is not a sequence classifier": (
        "rewards=[{name: reward_model, options: {model: 'MODEL'}}]",
        ("rewards[0]: reward_model reward", "not a sequence classifier", "LlamaForCausalLM")),
    "unknown option of the reward model": (
        "rewards=[{name: reward_model, options: {model: 'CLASSIFIER', normalise: batch}}]",
        ("invalid configuration: rewards[0].options.normalise", "did you mean 'normalize'?", "valid options")),
    "reward model in a forked process on CUDA": (
        "rewards=[{name: reward_model, isolation: process, options: {model: 'CLASSIFIER', device: cuda}}]",
        ("rewards[0].isolation", "process", "CUDA")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model_reward_input_exits_2_naming_it_before_any_model_loads(case, tiny_run, classifier, tmp_path,
                                                                         capsys, monkeypatch):
    override, names = CASES[case]
    override = (override.replace("PORT", str(free_port())).replace("MODEL", str(tiny_run.model))
                .replace("CLASSIFIER", str(classifier)))
    monkeypatch.delenv("STEADYRL_TEST_UNSET_KEY", raising=False)
    monkeypatch.setenv("STEADYRL_TEST_URL", "not a url")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the CUDA case; the trainer stays on the CPU
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModelForSequenceClassification):
        monkeypatch.setattr(cls, "from_pretrained", lambda *a, **k: pytest.fail(f"weights loaded: {a[0]}"))
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(tmp_path / "run"), override,
                     "trainer.device=cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steadyrl: error: "), err
    for name in names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
