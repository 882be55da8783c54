"""Reading, validating and showing a config imports neither torch nor transformers: a bad key is
answered in a fraction of a second, not after the seconds torch takes to import.

Each check runs in a fresh interpreter, since this test process has imported torch long ago."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HEAVY = ("torch", "transformers")


def _heavy_modules_after(code: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        print("heavy:" + ",".join(name for name in {HEAVY!r} if name in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    return [name for name in last.removeprefix("heavy:").split(",") if name]


def test_loading_validating_and_rendering_a_config_imports_no_torch(tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text("def fn(prompts, completions, **kw):\n    return [0.0] * len(completions)\n")
    path = tmp_path / "cfg.yaml"
    path.write_text(f"algorithm:\n  preset: ppo\nrewards:\n  - name: '{reward}:fn'\n  - name: math\n")
    assert _heavy_modules_after(f"""
        from steadyrl.config import config_notes, load_config, render_config
        config, preset_keys = load_config({str(path)!r}, ["optim.lr=1e-6"], with_sources=True)
        config_notes(config)
        render_config(config, preset_keys)
    """) == []


def test_a_config_error_imports_no_torch():
    assert _heavy_modules_after("""
        from steadyrl.config import load_config
        from steadyrl.errors import ConfigError
        try:
            load_config(None, ["trainer.max_step=3", "rollout.group_size=1"])
        except ConfigError:
            pass
        else:
            raise AssertionError("no error")
    """) == []


def test_the_config_show_command_imports_no_torch_or_transformers():
    assert _heavy_modules_after("""
        import contextlib, io
        from steadyrl.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["config", "show", "algorithm.preset=rloo"]) == 0
            assert main(["config", "show", "trainer.max_step=3"]) == 2
    """) == []


def test_train_and_eval_answer_a_config_error_before_importing_torch(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("trainer:\n  max_step: 3\n")
    assert _heavy_modules_after(f"""
        import contextlib, io
        from steadyrl.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            assert main(["train", "trainer.max_step=3"]) == 2
            assert main(["eval", "--model", "some/model", "algorithm.kl_mode=off"]) == 2
            assert main(["eval", "--output-dir", {str(run)!r}]) == 2  # the run's own config.yaml
            assert main(["train", "--output-dir", {str(run)!r}, "--resume"]) == 2
        assert err.getvalue().count("'trainer.max_step'") == 3, err.getvalue()
    """) == []
