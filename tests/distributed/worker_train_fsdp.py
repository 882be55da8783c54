"""``steadyrl train`` with ``trainer.parallel=fsdp`` on the CPU (gloo), run by ``torchrun`` from
test_torchrun_train.py. steadyrl refuses FSDP without CUDA (it is for models too large for one
GPU); here the layout check is told the device is a GPU, so that the FSDP2 code paths of the
training loop (sharded generation, full-state checkpoints) run on this CPU-only machine.

    torchrun --nproc_per_node 2 worker_train_fsdp.py CONFIG --output-dir DIR [key=value ...]
"""

import sys

import torch

from steadyrl.cli import main
from steadyrl.assembly import setup

_check = setup.check_parallel
setup.check_parallel = lambda config, device, world: _check(config, torch.device("cuda", 0), world)

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
