"""KL-Cov over two real processes (gloo, CPU): with every covariance tied (equal advantages) the
ranks share the tied tokens so that exactly ``k`` are penalised over both, the tokens one process
would take, whatever rows each rank holds."""

from __future__ import annotations

import pytest
import torch
from dp_common import HERE, launch

from steadyrl.config import load_config
from steadyrl.functional import top_count
from steadyrl.trainer.selection import select_tokens


@pytest.mark.slow
def test_two_ranks_select_exactly_k_tied_tokens_as_one_process(tmp_path):
    proc = launch([str(HERE / "worker_selection.py"), str(tmp_path)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = torch.load(tmp_path / "result.pt", weights_only=False)
    import worker_selection

    batch = worker_selection.tied_batch()
    algo = load_config(None, ["algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.3"]).algorithm
    alone = select_tokens(batch, algo).selected
    k = top_count(int(batch.loss_mask.sum()), 0.3)
    assert int(alone.sum()) == k
    assert sorted(result) == list(worker_selection.CUTS)
    for cut, selected in result.items():
        assert int(selected.sum()) == k, cut
        assert torch.equal(selected, alone), cut
