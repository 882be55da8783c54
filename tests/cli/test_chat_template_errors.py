"""A chat template that fails to render (it raises, say on a template variable from
``data.chat_template_kwargs``) exits 2 with one line that starts with the config key the user set
- ``data.chat_template_kwargs = {...}`` when variables are given, else ``data.chat_template`` -
before any model weights load; in a single-turn run (data/chat.py) and in a multi-turn one, whose
template is checked by agents/chat.py."""

from __future__ import annotations

import pytest
import transformers

from steadyrl import cli

# raises when the variable `strict` is set, or on any prompt containing '!'
TEMPLATE = ("{% if strict %}{{ raise_exception('strict mode is not supported') }}{% endif %}"
            "{% for m in messages %}{% if '!' in m['content'] %}{{ raise_exception('no bangs') }}{% endif %}"
            "{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")


@pytest.fixture(scope="module")
def failing_tokenizer(tiny_run, tmp_path_factory):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_run.model)
    tok.chat_template = TEMPLATE
    directory = tmp_path_factory.mktemp("failing_template")
    tok.save_pretrained(directory)
    return directory


CASES = {
    "a template variable the template refuses": (
        ["data.chat_template=true", "data.chat_template_kwargs={strict: true}"],
        "steadyrl: error: data.chat_template_kwargs = {'strict': True}: the tokenizer's chat template failed on "
        "prompt", "strict mode is not supported"),
    "a template that fails on a prompt": (
        ["data.chat_template=true", "data.train_path=BANGS"],
        "steadyrl: error: data.chat_template: the tokenizer's chat template failed on prompt", "no bangs"),
    "a multi-turn template check that fails on a variable": (
        ["rollout.multi_turn.tools=[steadyrl.demo.calculator:calculate]", "data.chat_template_kwargs={strict: true}"],
        "steadyrl: error: data.chat_template_kwargs = {'strict': True}: the chat template of", "strict mode"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failing_chat_template_is_named_by_the_config_key(case, tiny_run, failing_tokenizer, tmp_path, capsys,
                                                            monkeypatch):
    overrides, start, cause = CASES[case]
    bangs = tmp_path / "bangs.jsonl"
    bangs.write_text('{"prompt": "abc!", "answer": "cba"}\n')
    overrides = [o.replace("BANGS", str(bangs)) for o in overrides]
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail(f"weights loaded: {a[0]}"))
    code = cli.main(["train", str(tiny_run.config), "--output-dir", str(tmp_path / "run"),
                     f"model.tokenizer={failing_tokenizer}", *overrides])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start) and cause in lines[0], err


def test_eval_names_the_key_too(tiny_run, failing_tokenizer, tmp_path, capsys):
    code = cli.main(["eval", str(tiny_run.config), "--model", str(tiny_run.model), f"model.tokenizer={failing_tokenizer}",
                     "data.chat_template=true", "data.chat_template_kwargs={strict: true}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("steadyrl: error: data.chat_template_kwargs = {'strict': True}: "), err
