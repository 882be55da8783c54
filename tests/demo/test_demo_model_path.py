"""The demo trains its own model: a model.name_or_path without data was ignored silently (issue 33,
item 5); it exits 2 naming the key, as model.gguf_file does."""

from steadyrl import cli


def test_a_model_path_with_the_demo_exits_2_naming_the_key_before_the_run_starts(tmp_path, capsys):
    code = cli.main(["train", "model.name_or_path=HuggingFaceTB/SmolLM2-135M-Instruct", "trainer.max_steps=1",
                     "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "model.name_or_path = 'HuggingFaceTB/SmolLM2-135M-Instruct' but data.train_path is not set" in err
    assert "built-in demo trains its own model" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
