"""Issue #43 item 2 moved ``llm_judge``, ``reward_model`` and ``http`` to ``**options`` checked by their typed
model and grouped into parameter objects, promising the same behaviour. This test holds it to that: every
option of the three (alone and in combination: rubric, local / remote, cache, time-outs, ``api_key_env``,
headers, normalisation) and their bad values are built by today's tree and by the tree before the change
(commit :data:`BEFORE`, unpacked from git), each in its own process (tests/rewards/reward_probe.py), and
what they did must be equal: the requests sent to a local stub server, the scores, the metrics, and the
error of a bad option, through ``load_reward`` (as a config builds them) and through a direct call.
Skipped where the repository's history is not at hand (a source distribution)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("reward_probe.py")
BEFORE = "541297b"
"""The last commit before the parameter objects (issue #43 item 2)."""

URL = "{URL}"
JUDGE = {"model": "judge-m", "base_url": URL + "/v1", "retries": 0, "backoff_s": 0}
HTTP = {"url": URL + "/score", "retries": 0, "backoff_s": 0}
CRITERIA = [{"text": "is correct"}, {"text": "is polite", "weight": 3}]


INVALID = {"http-bad-url", "http-bad-batch", "http-typo", "http-no-url", "http-str-numbers", "judge-rubric-none",
           "judge-rubric-in-score", "judge-local-url", "judge-no-url", "judge-bad-template", "judge-bad-range",
           "judge-bad-pattern", "judge-typo", "judge-bad-backend", "rm-fixed-missing", "rm-mean-without-fixed",
           "rm-bad-std", "rm-bad-label", "rm-missing-model"}
"""Cases whose options the config refuses: through ``load_reward`` the same error as before; called directly,
the factory now checks them too (before: a TypeError, a crash on the first batch, or nothing), with one line
(tests/rewards/test_direct_factory_errors.py)."""


def _cases(classifier: str, sevens: str) -> list[dict]:
    http = [
        ("http-defaults", {"url": URL + "/score"}, {}),
        ("http-all", {**HTTP, "batch_size": 3, "concurrency": 1, "columns": ["answer", "gold"],
                      "headers": {"X-A": "one", "X-N": 3, "X-Secret": {"env": "PROBE_KEY"}},
                      "api_key_env": "PROBE_KEY", "request_timeout_s": 5, "check_url": False,
                      "answer_key": "gold", "cache_size": 0}, {}),
        ("http-cache-1", {**HTTP, "cache_size": 1, "batch_size": 1, "concurrency": 2}, {}),
        ("http-down", {**HTTP, "retries": 1, "backoff_s": 0.01}, {"status": 503}),
        ("http-bad-url", {"url": "ftp://x/score"}, {}),
        ("http-bad-batch", {**HTTP, "batch_size": 0}, {}),
        ("http-typo", {**HTTP, "bacth_size": 2}, {}),
        ("http-unset-key", {**HTTP, "api_key_env": "PROBE_UNSET_VAR"}, {}),
        ("http-no-url", {"batch_size": 2}, {}),
        ("http-str-numbers", {**HTTP, "batch_size": "2", "retries": "0", "check_url": "false"}, {}),
    ]
    judge = [
        ("judge-defaults", {"model": "judge-m", "base_url": URL + "/v1"}, {"reply": "8"}),
        ("judge-all", {**JUDGE, "template": "Q={prompt} A={completion} G={answer}", "system_prompt": "be fair",
                       "pattern": r"(\d+)/5", "min_score": 1, "max_score": 5, "scale": False,
                       "answer_key": "gold", "max_new_tokens": 5, "concurrency": 1, "request_timeout_s": 2,
                       "api_key_env": "PROBE_KEY", "check_url": False, "cache_size": 0}, {"reply": "4/5"}),
        ("judge-out-of-range", {**JUDGE, "max_score": 5}, {"reply": "9"}),
        ("judge-unparsable", {**JUDGE, "cache_size": 1}, {"reply": "no idea"}),
        ("judge-down", {**JUDGE, "retries": 1, "backoff_s": 0.01}, {"status": 500}),
        ("judge-rubric", {**JUDGE, "mode": "rubric", "criteria": CRITERIA}, {"reply": "fine\nVERDICT: PASS"}),
        ("judge-rubric-fail", {**JUDGE, "mode": "rubric", "criteria": CRITERIA, "max_new_tokens": 64,
                               "rubric_template": "R {prompt} {completion} {criterion}"},
         {"reply": "VERDICT: FAIL"}),
        ("judge-rubric-column", {**JUDGE, "mode": "rubric", "criteria_key": "crit"}, {"reply": "PASS"}),
        ("judge-rubric-none", {**JUDGE, "mode": "rubric"}, {}),
        ("judge-rubric-in-score", {**JUDGE, "criteria": CRITERIA}, {}),
        ("judge-local-url", {**JUDGE, "backend": "local"}, {}),
        ("judge-no-url", {"model": "judge-m"}, {}),
        ("judge-bad-template", {**JUDGE, "template": "no slot"}, {}),
        ("judge-bad-range", {**JUDGE, "min_score": 5, "max_score": 1}, {}),
        ("judge-bad-pattern", {**JUDGE, "pattern": "("}, {}),
        ("judge-typo", {**JUDGE, "modle": "x"}, {}),
        ("judge-bad-backend", {**JUDGE, "backend": "vllm"}, {}),
        ("judge-local", {"backend": "local", "model": sevens, "device": "cpu", "dtype": "float32",
                         "max_new_tokens": 1, "batch_size": 3, "template": "Q {prompt} A {completion}. Score:"},
         {}),
        ("judge-local-rubric", {"backend": "local", "model": sevens, "device": "cpu", "mode": "rubric",
                                "criteria": CRITERIA, "max_new_tokens": 2, "batch_size": 2}, {}),
    ]
    rm = {"model": classifier, "device": "cpu"}
    reward_model = [
        ("rm-defaults", rm, {}),
        ("rm-batch-norm", {**rm, "normalize": "batch", "batch_size": 3, "cache_size": 0}, {}),
        ("rm-fixed-norm", {**rm, "normalize": "fixed", "mean": 0.5, "std": 2, "max_length": 8}, {}),
        ("rm-no-template", {**rm, "chat_template": False, "dtype": "float32", "label_index": 0}, {}),
        ("rm-fixed-missing", {**rm, "normalize": "fixed", "mean": 1.0}, {}),
        ("rm-mean-without-fixed", {**rm, "std": 1.0}, {}),
        ("rm-bad-std", {**rm, "normalize": "fixed", "mean": 0, "std": 0}, {}),
        ("rm-bad-label", {**rm, "label_index": 3}, {}),
        ("rm-missing-model", {"device": "cpu"}, {}),
    ]
    named = [("http", c) for c in http] + [("llm_judge", c) for c in judge] + [("reward_model", c) for c in reward_model]
    return [{"id": cid, "name": name, "options": options, **extra} for name, (cid, options, extra) in named]


def _build_models(directory: Path) -> tuple[str, str]:
    """A tiny sequence classifier and a tiny causal LM (a character tokenizer each), saved under ``directory``."""
    import support
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForSequenceClassification

    tok = support.char_tokenizer()
    torch.manual_seed(0)
    classifier = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, num_labels=1, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    judge = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=512,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id))
    paths = []
    for name, model in (("classifier", classifier), ("judge", judge)):
        model.save_pretrained(directory / name)
        tok.save_pretrained(directory / name)
        paths.append(str(directory / name))
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def before_tree(tmp_path_factory) -> Path:
    """steadyrl as it was at :data:`BEFORE`, unpacked from git (skipped where there is no history)."""
    tree = tmp_path_factory.mktemp("before")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "steadyrl"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this checkout's history: {archive.stderr.decode()[:200]}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def _probe(tree: Path, cases_file: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(PROBE), str(cases_file)], capture_output=True, text=True, env=env,
                          cwd=tree, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_three_factories_behave_as_before_the_parameter_objects(before_tree, tmp_path):
    classifier, sevens = _build_models(tmp_path)
    cases = _cases(classifier, sevens)
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    before, now = _probe(before_tree, cases_file), _probe(ROOT, cases_file)
    assert set(now) == {c["id"] for c in cases}
    sent = [cid for cid, got in now.items() if got["load_reward"].get("requests")]
    assert len(sent) >= 10, "the stub server saw too few requests for the comparison to mean much"
    differ = {cid: {"before": before[cid], "now": now[cid]} for cid in now
              if now[cid] != before[cid] and (cid not in INVALID or now[cid]["load_reward"] != before[cid]["load_reward"])}
    assert not differ, json.dumps(differ, indent=1)[:20000]
    names = {c["id"]: c["name"] for c in cases}
    for cid in INVALID:  # a direct call: before, a TypeError, a crash on the first batch, or nothing; now this
        said = now[cid]["direct"]["error"]
        assert said.startswith(f"ConfigError: {names[cid]} reward: ") and "\n" not in said, said
