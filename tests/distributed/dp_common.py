"""What the data-parallel tests share with their torchrun workers: the fixed global batch, the
configs, and ``torchrun`` in a subprocess (gloo on the CPU, a free local port)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

from steadyrl.config import load_config
from steadyrl.rewards.scoring import ScoreResult
from steadyrl.trainer.batch import TrainBatch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))  # tests/: the shared helpers, also in torchrun workers
from support import tiny_batch  # noqa: E402,F401  (re-exported to the workers)
LOSS_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
FSDP_MODES = ("token-mean", "seq-mean-token-mean")


def step_config(mode: str, *extra: str):
    """One optimizer step over the batch in micro-batches of 3 (uneven: no_sync on all but the
    last), the KL as a loss term, reward normalisation and whitening over the whole batch."""
    return load_config(None, ["trainer.device=cpu", f"algorithm.loss_agg_mode={mode}", "algorithm.kl_mode=loss",
                              "trainer.micro_batch_size=3", "algorithm.reward_norm_mean=batch",
                              "algorithm.reward_norm_std=running", "algorithm.whiten_advantages=true",
                              "algorithm.advantage_estimator=rloo", "optim.max_grad_norm=1e6", *extra])


def score_result(rows: slice) -> ScoreResult:
    """Scores of the fixed batch (rows ``rows``), one invalid sample included."""
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(16, generator=g)[rows]
    valid = torch.ones(16, dtype=torch.bool)
    valid[5] = False
    valid = valid[rows]
    raw = [float(s) if v else None for s, v in zip(scores, valid)]
    return ScoreResult(names=["r"], weights={"r": 1.0}, raw={"r": raw}, scores=torch.where(valid, scores, 0.0),
                       valid=valid, failures={"r": {"exception": int((~valid).sum())}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def torchrun(args: list[str], *, nproc: int = 2, timeout: float = 180) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node nproc ARGS`` on a free local port, from the repository root."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)


def launch(args: list[str], *, nproc: int = 2, timeout: float = 180) -> subprocess.CompletedProcess:
    """What torchrun does for one node, without its agent process (4 s of start-up saved per
    run): ``python ARGS`` in ``nproc`` processes with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR
    and MASTER_PORT set. The return code is the first non-zero one; outputs are concatenated."""
    port = str(free_port())
    procs = []
    for rank in range(nproc):
        env = {**_env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
               "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=REPO))
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    codes = [proc.returncode for proc in procs]
    return subprocess.CompletedProcess(args, next((c for c in codes if c), 0),
                                       "".join(o for o, _ in outs), "".join(e for _, e in outs))


def critic_update(model_dir: str, batch: TrainBatch, wrap=None) -> dict:
    """One PPO update with a critic (value loss with the global token count); the critic's
    parameters after it. ``wrap(module, layers_of)`` wraps the policy and the critic (DDP)."""
    from steadyrl.models import ValueModel, load_policy
    from steadyrl.trainer.forward import PolicyLogprobs
    from steadyrl.trainer.update import ppo_update

    cpu = torch.device("cpu")
    policy = load_policy(model_dir, dtype=torch.float32, device=cpu)
    critic = ValueModel.from_pretrained(model_dir, dtype=torch.float32, device=cpu)
    torch.nn.init.normal_(critic.value_head.weight, std=0.1, generator=torch.Generator().manual_seed(2))
    train_policy, train_critic = PolicyLogprobs(policy), critic
    if wrap is not None:
        train_policy, train_critic = wrap(train_policy, policy), wrap(critic, critic)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    critic_opt = torch.optim.SGD(critic.parameters(), lr=0.1)
    config = load_config(None, ["trainer.device=cpu", "algorithm.preset=ppo", "trainer.micro_batch_size=3",
                                "algorithm.value_clip=0.2", "optim.max_grad_norm=1e6"])
    metrics, _, _ = ppo_update(train_policy, opt, batch, config, kl_coef=0.0, critic=train_critic,
                               critic_optimizer=critic_opt, device=cpu)
    return {"critic": {k: v.detach().clone() for k, v in critic.state_dict().items()},
            "value_loss": metrics["critic/value_loss"], "vf_clipfrac": metrics["critic/vf_clipfrac"]}
