"""A quick numerical self-check of the functional core on hostile inputs (``steadyrl selfcheck``)."""

from __future__ import annotations

import torch

from . import functional as F


def run_selfcheck() -> list[tuple[str, bool]]:
    """Run each check; return ``(name, passed)`` pairs."""
    torch.manual_seed(0)
    results = []

    logits = (torch.randn(2, 4, 64) * 1e4).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 64, (2, 4))
    lp, ent = F.logprobs_and_entropy_from_logits(logits, labels)
    (lp.sum() + ent.sum()).backward()
    results.append(("log-probs of bf16 logits at +-1e4 are finite", bool(
        torch.isfinite(lp).all() and torch.isfinite(ent).all() and torch.isfinite(logits.grad).all())))

    d = torch.tensor([-1e4, -41.0, 0.0, 41.0, 1e4], requires_grad=True)
    ok = True
    for name in F.KL_ESTIMATORS:
        d.grad = None
        F.kl_penalty(d, torch.zeros(5), name).sum().backward()
        ok &= bool(torch.isfinite(d.grad).all())
    results.append(("every KL estimator has finite gradients at d = +-1e4", ok))

    scores = torch.tensor([1.0, 1.0, 1.0, 0.5], dtype=torch.float16)
    adv = F.grpo_advantages(scores, torch.ones(4, 3), group_size=1)
    adv_eq = F.grpo_advantages(scores[:3], torch.ones(3, 3), group_size=3)
    results.append(("GRPO groups of one and of equal rewards give 0",
                    bool((adv == 0).all() and (adv_eq == 0).all())))

    x = torch.randn(2, 3)
    one = torch.tensor([[1, 0, 0], [0, 0, 0]])
    results.append(("whitening one valid token gives no NaN",
                    bool(torch.isfinite(F.masked_whiten(x, one)).all())))
    return results


def main() -> int:
    results = run_selfcheck()
    for name, passed in results:
        print(f"  [{'ok' if passed else 'FAIL'}] {name}")
    failed = sum(not p for _, p in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0
