"""``steadyrl eval --output-dir RUN --step N`` evaluates an older checkpoint of a run (issue 33,
item 13); a step with no checkpoint exits 2 naming those kept, before any model loads."""

import json

from steadyrl import cli


def test_eval_of_an_older_checkpoint_and_of_a_missing_one(tiny_run, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", str(tiny_run.config), "--output-dir", str(out), "trainer.save_every=1",
                     "trainer.keep_checkpoints=5"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", "--output-dir", str(out), "--step", "1", "--trust-run-code"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed[printed.index("{"):])
    assert result["model"] == str(out / "checkpoints" / "step_000001" / "policy")
    assert cli.main(["eval", "--output-dir", str(out), "--step", "7", "--trust-run-code"]) == 2
    err = capsys.readouterr().err
    assert "--step 7:" in err and "has no checkpoint of that step; it has step(s) 1, 2" in err
    assert cli.main(["eval", str(tiny_run.config), "--step", "1"]) == 2
    assert "--step 1: give the run with --output-dir RUN_DIR" in capsys.readouterr().err
