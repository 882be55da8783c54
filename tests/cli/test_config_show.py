"""``steadyrl config show``: the resolved config as commented YAML, preset values marked."""

from __future__ import annotations

import re

import yaml

from steadyrl import cli
from steadyrl.config import ALGORITHM_PRESETS, load_config
from steadyrl.config.schema import Config

KEY_LINE = re.compile(r"^(?P<pad> *)(?P<key>\w+):(?P<rest>.*)$")


def _show(capsys, *args: str) -> str:
    code = cli.main(["config", "show", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err == ""
    return captured.out


def _scalar_lines(text: str) -> dict[str, str]:
    """``dotted.key -> the rest of its line`` for every key that holds a value (not a section)."""
    out, stack = {}, []  # stack: (indent, key) of the enclosing sections
    for line in text.splitlines():
        m = KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m["pad"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m["key"]))
        rest = m["rest"].strip()
        if rest and not rest.startswith("#"):
            out[".".join(key for _, key in stack)] = rest
    return out


def test_config_show_with_no_config_prints_the_defaults_with_a_help_comment_on_every_key(capsys):
    """Issue 24: with no config it showed the demo's values (lr 2e-4, 8 new tokens) as if they
    were the defaults (1e-6, 512)."""
    text = _show(capsys)
    header = [line for line in text.splitlines() if line.startswith("# steadyrl's defaults")]
    assert header and "demo.task=reverse" in header[0]
    assert Config.model_validate(yaml.safe_load(text)) == load_config(demo=False)
    values = _scalar_lines(text)
    assert "optim.lr" in values and "algorithm.pg_clip" in values and "demo.num_train" in values
    for key, rest in values.items():
        assert "  # " in rest, f"{key} has no help comment: {rest!r}"
    shown, defaults = yaml.safe_load(text), Config()
    assert shown["optim"]["lr"] == defaults.optim.lr == 1e-6
    assert shown["rollout"]["max_new_tokens"] == defaults.rollout.max_new_tokens == 512


def test_config_show_with_a_demo_key_prints_that_demo_and_says_so(capsys):
    for task in ("reverse", "tool"):
        text = _show(capsys, f"demo.task={task}")
        assert "\n# the built-in demo's config" in "\n" + text
        assert Config.model_validate(yaml.safe_load(text)) == load_config(None, [f"demo.task={task}"])
    values = _scalar_lines(_show(capsys, "demo.task=reverse"))
    assert values["rollout.prompts_per_step"].startswith("32")  # the demo's value, not the default 8


def test_help_texts_name_the_rule_not_a_note_number():
    from steadyrl.config.schema import Config as Schema

    def helps(model):
        for field in model.model_fields.values():
            yield field.description or ""
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                yield from helps(annotation)

    texts = list(helps(Schema))
    assert texts and not [t for t in texts if "seed 00" in t]


def test_config_show_marks_the_keys_a_preset_filled(capsys, tiny_run):
    text = _show(capsys, str(tiny_run.config), "algorithm.preset=ppo", "algorithm.kl_coef=0.02")
    values = _scalar_lines(text)
    preset = ALGORITHM_PRESETS["ppo"]
    for key in preset:
        if key != "kl_coef":
            assert values[f"algorithm.{key}"].endswith("[preset]"), key
    assert values["algorithm.advantage_estimator"].startswith("gae")
    assert values["algorithm.kl_coef"].startswith("0.02")
    assert "[preset]" not in values["algorithm.kl_coef"]  # the user's value
    assert "[preset]" not in values["algorithm.preset"]
    assert "[preset]" not in values["optim.lr"]  # presets touch the algorithm section only
    assert sum("[preset]" in rest for rest in values.values()) == len(preset) - 1


def test_config_show_of_bad_input_exits_2(capsys):
    code = cli.main(["config", "show", "algorithm.pg_clip=-1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("steadyrl: error: ") and "algorithm.pg_clip" in err and "-1" in err


def test_config_show_as_a_real_command(steadyrl_cli, tiny_run):
    proc = steadyrl_cli("config", "show", str(tiny_run.config), "algorithm.preset=ppo")
    assert proc.returncode == 0, proc.stderr
    assert "advantage_estimator: gae  # " in proc.stdout and "[preset]" in proc.stdout
    assert proc.stderr == ""


def test_config_show_prints_every_problem_of_a_config_on_its_own_error_line(tmp_path, capsys):
    path = tmp_path / "cfg.yaml"
    path.write_text("learning_rate: 1.0e-6\ntrainer:\n  max_step: 3\nrollout:\n  group_size: 0\n")
    code = cli.main(["config", "show", str(path)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.splitlines() == [
        "steadyrl: error: unknown config key 'learning_rate' (TRL's name): use 'optim.lr'",
        "steadyrl: error: unknown config key 'trainer.max_step'; did you mean 'trainer.max_steps'?",
        "steadyrl: error: invalid configuration: rollout.group_size = 0: Input should be greater than or equal to 1",
    ]


def test_config_show_refuses_a_bad_tool_spec_with_the_error_train_gives(tmp_path, capsys, tiny_run):
    tools = tmp_path / "tools.py"
    tools.write_text('def add(a: int, b: int) -> int:\n    """Add two numbers.\n\n    Args:\n        a: the first\n'
                     '        b: the second\n    """\n    return a + b\n')
    bad = [str(tiny_run.config), f"rollout.multi_turn.tools=[{tools}:sub]"]
    assert cli.main(["config", "show", *bad, "--trust-run-code"]) == 2  # loaded as train loads it (issue 30)
    shown = capsys.readouterr()
    assert shown.out == "" and len(shown.err.splitlines()) == 1
    assert cli.main(["train", *bad, "--output-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == shown.err  # the same line, naming rollout.multi_turn.tools[0]
    assert "rollout.multi_turn.tools[0]" in shown.err and "'sub'" in shown.err
    assert cli.main(["config", "show", "rollout.multi_turn.tools=[calc]"]) == 2  # not a file.py:function spec
    assert "rollout.multi_turn.tools[0]='calc'" in capsys.readouterr().err
    assert cli.main(["config", "show", str(tiny_run.config), f"rollout.multi_turn.tools=[{tools}:add]"]) == 0
    assert cli.main(["config", "show", str(tiny_run.config), f"rollout.multi_turn.tools=[{tools}:add]",
                     "rollout.multi_turn.tool_parser=no_such_parser"]) == 2
    assert "no_such_parser" in capsys.readouterr().err


def test_config_show_names_the_float16_compensation_buffer_float16(capsys):
    """The buffer has the stored weights' dtype: float16 weights keep a float16 buffer, not a bfloat16 one."""
    out = _show(capsys, "model.dtype=float16", "model.bf16_update=kahan")
    line = next(x for x in out.splitlines() if x.startswith("#   on cuda:"))
    assert "float16 compensation buffer" in line and "bfloat16" not in line
    out = _show(capsys, "model.dtype=bfloat16", "model.bf16_update=kahan")
    assert "bfloat16 compensation buffer" in next(x for x in out.splitlines() if x.startswith("#   on cuda:"))


def test_config_show_says_float16_stochastic_rounding_rounds_to_nearest(capsys):
    """LowPrecisionAdamW rounds stochastically into bfloat16 only; float16 weights round to nearest."""
    out = _show(capsys, "model.dtype=float16", "model.bf16_update=stochastic_rounding")
    line = next(x for x in out.splitlines() if x.startswith("#   on cuda:"))
    assert "rounding to nearest into float16" in line and "stochastic rounding is for bfloat16 only" in line
