"""``steadyrl.run.checkpoint`` on its own: atomic writes, pruning, and what an interrupted
save leaves behind. The models are stand-ins whose ``save_pretrained`` writes one file (and can
be made to die half-way), so every crash point is reached on purpose, not by timing."""

from __future__ import annotations

import os

import pytest
import torch

from steadyrl.run import checkpoint as ckpt


class Saver:
    """A policy / tokenizer stand-in: ``save_pretrained`` writes ``<name>.txt`` = ``tag``."""

    def __init__(self, name: str, tag: str, die: bool = False):
        self.name, self.tag, self.die = name, tag, die

    def save_pretrained(self, directory, **kwargs):
        os.makedirs(directory, exist_ok=True)
        (directory / f"{self.name}.txt").write_text(self.tag)
        if self.die:
            raise KeyboardInterrupt("killed in the middle of a save")


def save(root, step, tag="a", *, keep=2, die=False):
    return ckpt.save_checkpoint(root, step, policy=Saver("model", tag, die), tokenizer=Saver("tokenizer", tag),
                                state={"step": step, "tag": tag}, keep=keep)


def tag_of(path) -> str:
    return (path / "policy" / "model.txt").read_text()


def names(root) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_save_writes_a_complete_checkpoint_and_nothing_else(tmp_path):
    path = save(tmp_path, 3)
    assert path == tmp_path / "step_000003" and names(tmp_path) == ["step_000003"]
    assert tag_of(path) == "a" and (path / "policy" / "tokenizer.txt").is_file()
    assert ckpt.load_state(path) == {"step": 3, "tag": "a"}
    assert '"step": 3' in (path / "trainer_state.json").read_text()


def test_keep_k_prunes_to_the_newest_k(tmp_path):
    for step in (2, 4, 6, 8, 10):
        save(tmp_path, step, keep=3)
    assert names(tmp_path) == ["step_000006", "step_000008", "step_000010"]
    save(tmp_path, 12, keep=1)
    assert names(tmp_path) == ["step_000012"]


def test_steps_sort_as_numbers_past_the_padding(tmp_path):
    for step in (999_999, 1_000_000):
        save(tmp_path, step, keep=5)
    assert ckpt.latest_checkpoint(tmp_path).name == "step_1000000"


def test_a_crash_in_the_middle_of_a_save_leaves_the_previous_checkpoint_intact(tmp_path):
    save(tmp_path, 2, "good")
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 4, "half", die=True)
    leftovers = [n for n in names(tmp_path) if n.startswith(".tmp-step_000004")]
    assert len(leftovers) == 1  # the half-written one is there, under a name resume ignores
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_000002"
    assert tag_of(tmp_path / "step_000002") == "good"
    ckpt.clean_partial(tmp_path)
    assert names(tmp_path) == ["step_000002"]


def test_a_leftover_tmp_dir_is_ignored_by_latest_and_removed_by_clean_partial(tmp_path):
    save(tmp_path, 2)
    (tmp_path / ".tmp-step_000009-1234" / "policy").mkdir(parents=True)  # newer step, incomplete
    (tmp_path / "step_000007.partial").mkdir()  # not a checkpoint name either
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_000002"
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_000002"]
    ckpt.clean_partial(tmp_path)
    assert names(tmp_path) == ["step_000002", "step_000007.partial"]


def test_re_saving_a_step_swaps_it_atomically(tmp_path):
    save(tmp_path, 4, "first")
    path = save(tmp_path, 4, "second")
    assert tag_of(path) == "second" and names(tmp_path) == ["step_000004"]


def test_a_crash_in_the_middle_of_the_swap_keeps_the_step(tmp_path, monkeypatch):
    """Re-saving a step moves the old copy aside, then moves the new one in. A crash between the
    two renames leaves no ``step_N`` at all, only ``.old-step_N`` (complete) and ``.tmp-step_N``:
    cleaning up must put the old copy back, not delete the newest checkpoint of the run."""
    save(tmp_path, 2, "older")
    save(tmp_path, 4, "first")
    real_replace, calls = os.replace, []

    def crash_on_second(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the two renames")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 4, "second")
    monkeypatch.undo()
    assert "step_000004" not in names(tmp_path)
    ckpt.clean_partial(tmp_path)  # what `steadyrl train --resume` does first
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_000004"
    assert tag_of(tmp_path / "step_000004") == "first"
    assert names(tmp_path) == ["step_000002", "step_000004"]


def test_clean_partial_on_a_missing_directory_is_a_no_op(tmp_path):
    ckpt.clean_partial(tmp_path / "nowhere")
    assert ckpt.latest_checkpoint(tmp_path / "nowhere") is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fsync'd files")
def test_every_file_is_on_disk_before_the_checkpoint_is_renamed_into_place(tmp_path, monkeypatch):
    """A rename may reach the disk before the data it points to: a power cut would then leave a
    complete-looking step_N of empty files, with the older checkpoints already pruned."""
    synced, real_fsync, real_replace = set(), os.fsync, os.replace

    def fsync(fd):
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst):
        if os.path.basename(str(src)).startswith(".tmp-"):
            files = {os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs}
            assert files and files <= synced, sorted(files - synced)
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "fsync", fsync)
    monkeypatch.setattr(ckpt.os, "replace", replace)
    save(tmp_path, 2)
    save(tmp_path, 2, "again")  # the swap path too
    assert tag_of(tmp_path / "step_000002") == "again"


class _RunsCode:
    """What a hostile ``state.pt`` may hold: unpickling it calls ``Path.touch`` on a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return (Path.touch, (Path(self.marker),))


def test_a_state_pt_whose_unpickling_would_run_code_is_refused_and_runs_nothing(tmp_path):
    from steadyrl.errors import ConfigError

    path = save(tmp_path, 1)
    marker = tmp_path / "code-ran"
    torch.save({"step": 1, "payload": _RunsCode(marker)}, path / "state.pt")
    with pytest.raises(ConfigError, match=r"state\.pt.*refused"):
        ckpt.load_state(path)
    assert not marker.exists()


def test_the_rng_states_are_plain_data_that_load_with_weights_only(tmp_path):
    """Saved as steadyrl writes them, read back by a bare ``torch.load(weights_only=True)``, and
    every generator continues where it was."""
    import random

    import numpy as np

    state = ckpt.rng_state()
    torch.save({"rng": state}, tmp_path / "state.pt")
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)["rng"]
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.random(), np.random.rand(), torch.rand(())  # move every generator on
    ckpt.set_rng_state(loaded)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected


def test_a_checkpoint_of_an_older_version_with_a_numpy_rng_array_still_loads(tmp_path):
    import random

    import numpy as np

    path = save(tmp_path, 1)
    legacy = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    torch.save({"step": 1, "rng": legacy}, path / "state.pt")
    expected = float(np.random.rand())
    np.random.rand()
    ckpt.set_rng_state(ckpt.load_state(path)["rng"])
    assert float(np.random.rand()) == expected
