"""Run by test_selection_ranks.py in 2 processes (gloo, CPU): the KL-Cov and Clip-Cov selections of
each rank's rows of a batch whose advantages are all equal (every covariance 0, every token tied),
gathered to rank 0 and written to ``OUT/result.pt``.

    python worker_selection.py OUT_DIR   (RANK / WORLD_SIZE / MASTER_* set by dp_common.launch)
"""

import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import support  # noqa: E402

from steadyrl import distributed as dist  # noqa: E402
from steadyrl.config import load_config  # noqa: E402
from steadyrl.trainer.selection import select_tokens  # noqa: E402

CUTS = (1, 3, 5)  # rank 0 holds rows [0, cut), rank 1 the rest


def tied_batch():
    """Six rows of ragged responses, every advantage 0.7."""
    batch = support.tiny_batch(seed=2, rows=6, response=5)
    return replace(batch, advantages=torch.full_like(batch.advantages, 0.7))


def main(out: Path) -> None:
    torch.set_num_threads(1)
    assert dist.init_from_env(use_cuda=False) and dist.world_size() == 2
    kl = load_config(None, ["algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.3"]).algorithm
    result = {}
    for cut in CUTS:
        rows = slice(0, cut) if dist.rank() == 0 else slice(cut, 6)
        selected = select_tokens(tied_batch().select(rows), kl).selected
        result[cut] = torch.cat(dist.gather_objects(selected))
    if dist.rank() == 0:
        torch.save(result, out / "result.pt")
    dist.teardown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
