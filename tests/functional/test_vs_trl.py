"""Differential tests against TRL 1.16's own functions (the ``dev`` extra pins ``trl==1.16.*``).

Called directly: ``trl.trainer.utils.selective_log_softmax``, ``entropy_from_logits``, ``nanstd``,
``GRPOTrainer.get_high_entropy_mask``; TRL's whole policy loss ``GRPOTrainer._compute_loss`` on a
minimal stand-in trainer (its model pass replaced by the given log-probs), for every ``loss_type``
steadyrl has an equivalent of (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, and GSPO as
``importance_sampling_level="sequence"``), with its k3 KL term (``beta``) and its entropy mask
(``top_entropy_quantile``). The advantages and the vLLM importance-sampling weights, which TRL has
only inline in its generation methods, are in test_vs_trl_advantages.py.

Inputs are random and hostile: huge and tiny logits, fp16 / bf16, empty masks, groups of one,
equal rewards. The differences that are intended are asserted as such and named in
docs/migrating.md (the empty-row count of the ``seq-mean`` modes, the clamps of seeds 000 / 002).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

trl_utils = pytest.importorskip("trl.trainer.utils")
GRPOTrainer = pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer

from steadyrl.functional import (  # noqa: E402
    POLICY_LOSSES,
    entropy_from_logits,
    high_entropy_mask,
    kl_penalty,
    logprobs_from_logits,
)

torch.set_num_threads(1)


# --- log-probs and entropy ------------------------------------------------------------------------

def _logits(seed, scale, dtype, shape=(3, 5, 11)):
    """Random logits of spread ``scale`` in ``dtype``, kept finite (fp16 tops out at 65504)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * scale
    top = torch.finfo(dtype).max if dtype.is_floating_point else None
    return x.clamp(-top, top).to(dtype), torch.randint(0, shape[-1], shape[:-1], generator=g)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 30.0, 1e4])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_selective_log_softmax_and_entropy_match_trls_in_float64(scale, temperature):
    logits, labels = _logits(0, scale, torch.float64)
    theirs = trl_utils.selective_log_softmax(logits, labels, temperature=temperature)
    ours = logprobs_from_logits(logits, labels, temperature=temperature)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    scaled = logits / temperature
    torch.testing.assert_close(entropy_from_logits(logits, temperature=temperature),
                               trl_utils.entropy_from_logits(scaled), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 50.0, 6e4])
def test_low_precision_logits_match_trl_on_the_float64_reference(dtype, scale):
    """TRL computes a bf16 / fp16 input in its own dtype (its log-probs come back in it); steadyrl
    in float32. Both are checked against the float64 truth of the same rounded logits: steadyrl is
    never further from it than TRL, and within float32 rounding."""
    logits, labels = _logits(1, scale, dtype)
    truth = trl_utils.selective_log_softmax(logits.double(), labels)
    theirs = trl_utils.selective_log_softmax(logits, labels).double()
    ours = logprobs_from_logits(logits, labels)
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    ours_err = (ours.double() - truth).abs().max().item()
    assert ours_err <= 1e-6 * max(1.0, truth.abs().max().item())
    assert ours_err <= (theirs - truth).abs().max().item() + 1e-6
    h_truth = trl_utils.entropy_from_logits(logits.double())
    torch.testing.assert_close(entropy_from_logits(logits).double(), h_truth, rtol=1e-5, atol=1e-5)


def test_masked_minus_inf_logits_give_trls_log_probs_and_a_finite_entropy():
    """A vocabulary entry masked to -inf (a banned token): same log-probs as TRL's, entropy finite."""
    logits, labels = _logits(2, 3.0, torch.float32)
    logits[..., 0] = float("-inf")
    labels = labels.clamp(min=1)
    torch.testing.assert_close(logprobs_from_logits(logits, labels),
                               trl_utils.selective_log_softmax(logits, labels), rtol=1e-6, atol=1e-6)
    ours = entropy_from_logits(logits)
    assert torch.isfinite(ours).all()
    reference = trl_utils.entropy_from_logits(logits[..., 1:].double())  # the entropy over the live entries
    torch.testing.assert_close(ours.double(), reference, rtol=1e-5, atol=1e-5)


# --- TRL's GRPOTrainer methods on a stand-in ----------------------------------------------------------

class _Accelerator:
    """One process: TRL's collectives are identities."""

    num_processes, sync_gradients = 1, True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def reduce(self, x, reduction="sum"):
        return x


class _StandIn:
    """What ``GRPOTrainer._compute_loss`` reads of its trainer, with the model pass replaced by the
    given per-token log-probs and entropies."""

    get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask
    _compute_loss = GRPOTrainer._compute_loss

    def __init__(self, loss_type, logps, entropies, *, eps_low=0.2, eps_high=0.28, beta=0.0, level="token",
                 top_entropy_quantile=1.0, max_completion_length=8, sapo=(1.0, 1.05)):
        self.loss_type, self.beta, self.importance_sampling_level = loss_type, beta, level
        self.epsilon_low, self.epsilon_high = eps_low, eps_high
        self.top_entropy_quantile, self.max_completion_length = top_entropy_quantile, max_completion_length
        self.off_policy_mask_threshold, self.use_vllm, self.vllm_importance_sampling_correction = None, False, False
        self._entropy_bonus_enabled = self.aux_loss_enabled = False
        self.model, self.current_gradient_accumulation_steps = SimpleNamespace(training=True), 1
        self.accelerator, self._metrics = _Accelerator(), defaultdict(lambda: defaultdict(list))
        self.args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1,
                                    sapo_temperature_pos=sapo[0], sapo_temperature_neg=sapo[1])
        self._out = (logps, entropies)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self._out[0], self._out[1], None


def _trl_loss(loss_type, logps, old, adv, mask, ref=None, entropies=None, **kw):
    B, T = mask.shape
    inputs = {"prompt_ids": torch.ones(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": adv, "old_per_token_logps": old, "num_items_in_batch": mask.sum().double()}
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    ent = torch.zeros(B, T, dtype=logps.dtype) if entropies is None else entropies
    return _StandIn(loss_type, logps, ent, **kw)._compute_loss(None, inputs)


def _policy_batch(seed, B=6, T=8, empty_rows=False, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    if empty_rows:
        lengths[1] = 0
    mask = (torch.arange(T) < lengths.unsqueeze(1)).double()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logps = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    ref = old + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ent = torch.rand(B, T, generator=g, dtype=torch.float64) * 4
    return logps, old, adv, mask, ref, ent


# TRL loss_type (and level) -> steadyrl's policy loss, aggregation and clip arguments
EQUIVALENTS = {
    "grpo": ("ppo", "seq-mean-token-mean", {}),
    "bnpo": ("ppo", "token-mean", {}),
    "dr_grpo": ("ppo", "seq-mean-token-sum-norm", {"norm_length": 8}),
    "dapo": ("ppo", "token-mean", {}),
    "cispo": ("cispo", "token-mean", {"clip_low": 1.0, "clip_high": 5.0 - 1.0}),
    # TRL builds its SAPO temperatures with torch.where(adv > 0, 1.0, 1.05) from Python floats: a float32
    # tensor, so its tau_neg is float32(1.05) = 1.04999995 even in a float64 loss (a TRL rounding, ~1e-7
    # relative; steadyrl keeps 1.05 exact). Passed here as TRL's number to compare the formula itself.
    "sapo": ("sapo", "seq-mean-token-mean", {"sapo_tau_neg": float(torch.tensor(1.05, dtype=torch.float32))}),
    "gspo": ("gspo", "seq-mean-token-mean", {}),
    "luspo": ("gspo", "seq-mean-token-sum", {}),
}


def _trl_kwargs(loss_type):
    if loss_type == "cispo":
        return "cispo", {"eps_high": 5.0}
    if loss_type in ("gspo", "luspo"):
        return ("grpo" if loss_type == "gspo" else "luspo"), {"level": "sequence", "eps_low": 3e-4,
                                                               "eps_high": 4e-4}
    return loss_type, {}


def _ours(loss_type, logps, old, adv, mask, **extra):
    name, mode, options = EQUIVALENTS[loss_type]
    clip = {"clip_low": 3e-4, "clip_high": 4e-4} if name == "gspo" else {"clip_low": 0.2, "clip_high": 0.28}
    clip.update({k: v for k, v in options.items() if k.startswith(("clip", "sapo"))})
    agg = {k: v for k, v in options.items() if not k.startswith(("clip", "sapo"))}
    if name == "sapo":
        clip = {k: v for k, v in clip.items() if k.startswith("sapo")}
    adv_tokens = adv.unsqueeze(-1).expand_as(mask).contiguous()
    loss, _ = POLICY_LOSSES[name](logps, old, adv_tokens, mask, loss_agg_mode=mode, **clip, **agg, **extra)
    return loss


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("loss_type", sorted(EQUIVALENTS))
def test_every_trl_loss_type_equals_its_steadyrl_equivalent_in_value_and_gradient(loss_type, seed):
    logps, old, adv, mask, _, _ = _policy_batch(seed, spread=0.5 if seed % 2 else 0.05)
    trl_type, kw = _trl_kwargs(loss_type)
    theirs_lp, ours_lp = logps.clone().requires_grad_(True), logps.clone().requires_grad_(True)
    theirs = _trl_loss(trl_type, theirs_lp, old, adv, mask, **kw)
    ours = _ours(loss_type, ours_lp, old, adv, mask)
    theirs.backward()
    ours.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-7, abs=1e-12)  # MASK_EPS in our denominators
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=1e-7, atol=1e-12)
    assert theirs_lp.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("loss_type", sorted(EQUIVALENTS))
def test_an_all_masked_micro_batch_is_zero_loss_and_zero_gradient_in_both(loss_type, dtype):
    logps, old, adv, mask, _, _ = _policy_batch(2)
    logps, old, adv = logps.to(dtype), old.to(dtype), adv.to(dtype)
    empty = torch.zeros_like(mask, dtype=dtype)
    trl_type, kw = _trl_kwargs(loss_type)
    theirs_lp, ours_lp = logps.clone().requires_grad_(True), logps.clone().requires_grad_(True)
    theirs = _trl_loss(trl_type, theirs_lp, old, adv, empty, **kw)
    ours = _ours(loss_type, ours_lp, old, adv, empty)
    theirs.backward()
    ours.backward()
    assert ours.item() == theirs.item() == 0.0
    assert not ours_lp.grad.any() and not theirs_lp.grad.any()


@pytest.mark.parametrize("loss_type", ["bnpo", "cispo", "sapo"])
def test_a_log_ratio_beyond_the_clamp_is_finite_here_where_trls_overflows(loss_type):
    """Intended (steadyrl/functional/losses.py): the log-ratio is clamped to [-20, 20] before exp,
    so a stale or corrupted old log-prob gives a finite loss and gradient; TRL's exp(800) is inf."""
    logps, old, adv, mask, _, _ = _policy_batch(4)
    old = old.clone()
    old[0, 0] = logps[0, 0] - 800.0  # ratio e^800
    adv = -adv.abs()  # a negative advantage: PPO's min does not cap the ratio
    trl_type, kw = _trl_kwargs(loss_type)
    theirs = _trl_loss(trl_type, logps, old, adv, mask, **kw)
    lp = logps.clone().requires_grad_(True)
    ours = _ours(loss_type, lp, old, adv, mask)
    ours.backward()
    assert torch.isfinite(ours) and torch.isfinite(lp.grad).all()
    assert not torch.isfinite(theirs) or loss_type in ("cispo", "sapo")  # cispo caps r, sapo's gate saturates


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "sapo", "cispo"])
def test_low_precision_log_probs_give_the_float64_loss_of_the_same_numbers(loss_type, dtype):
    """TRL computes the loss in its inputs' dtype; steadyrl reduces in float32. On bf16 / fp16
    log-probs both are compared with TRL's own loss of the same (rounded) numbers in float64:
    steadyrl within float32 rounding of it, and never further from it than TRL."""
    logps, old, adv, mask, _, _ = _policy_batch(6, B=16, T=32)
    low = [x.to(dtype) for x in (logps, old, adv)]
    trl_type, kw = _trl_kwargs(loss_type)
    truth = _trl_loss(trl_type, *[x.double() for x in low], mask, **kw).item()
    theirs = _trl_loss(trl_type, *low, mask.to(dtype), **kw).item()
    ours = _ours(loss_type, *low, mask).item()
    assert abs(ours - truth) <= 1e-5 * max(1.0, abs(truth))
    assert abs(ours - truth) <= abs(theirs - truth) + 1e-6


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_an_empty_row_is_not_a_sequence_here_and_is_one_in_trls_mean(loss_type):
    """Intended difference (docs/migrating.md): TRL's ``grpo`` / ``dr_grpo`` average over every row
    of the micro-batch, an empty one (all tokens masked: a tool-only completion) included; here the
    denominators count the sequences that have a valid token, globally."""
    logps, old, adv, mask, _, _ = _policy_batch(3, empty_rows=True)
    trl_type, kw = _trl_kwargs(loss_type)
    theirs = _trl_loss(trl_type, logps, old, adv, mask, **kw)
    ours = _ours(loss_type, logps, old, adv, mask)
    rows, seqs = mask.shape[0], int((mask.sum(-1) > 0).sum())
    assert seqs < rows
    assert ours.item() == pytest.approx(theirs.item() * rows / seqs, rel=1e-7)


@pytest.mark.parametrize("seed", range(3))
def test_trls_k3_kl_term_is_steadyrls_k3_in_the_loss(seed):
    """TRL adds ``beta * (exp(ref - logp) - (ref - logp) - 1)`` to the per-token loss; steadyrl's
    ``kl_mode: loss`` adds ``kl_coef * agg(k3)`` with the same aggregation."""
    logps, old, adv, mask, ref, _ = _policy_batch(seed)
    beta = 0.04
    with_kl = _trl_loss("bnpo", logps, old, adv, mask, ref=ref, beta=beta)
    without = _trl_loss("bnpo", logps, old, adv, mask)
    k3 = kl_penalty(logps, ref, "k3")
    ours = (k3 * mask).sum() / mask.sum()
    assert (with_kl - without).item() == pytest.approx(beta * ours.item(), rel=1e-9)


def test_k3_differs_from_trls_only_where_the_seed_clamps_bind():
    """Intended (seeds 000 / 002): the log-ratio is clamped to [-40, 40] and the k3 value to
    [-10, 10]; TRL's k3 overflows to inf there (a NaN gradient). Elsewhere the same number."""
    logps = torch.tensor([[-1.0, -2.0, -50.0, -0.1]], dtype=torch.float64)
    ref = torch.tensor([[-1.3, -1.0, -1.0, -80.0]], dtype=torch.float64)
    d = ref - logps
    theirs = torch.exp(d) - d - 1
    ours = kl_penalty(logps, ref, "k3")
    torch.testing.assert_close(ours[:, :2], theirs[:, :2], rtol=1e-12, atol=1e-12)
    assert ours[0, 2].item() == 10.0 and theirs[0, 2].item() > 1e20  # TRL: e^49
    assert ours[0, 3].item() == pytest.approx(min(10.0, float(torch.expm1(torch.tensor(-40.0)) + 40)), rel=1e-9)


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.9])
def test_trls_entropy_mask_and_loss_equal_steadyrls_token_selection(quantile):
    """float32 entropies, as a model's forward gives them."""
    logps, old, adv, mask, _, ent = _policy_batch(5)
    ent = ent.float()
    stand_in = _StandIn("bnpo", logps, ent)
    theirs_mask = stand_in.get_high_entropy_mask(ent, mask, 1 - quantile)
    ours_mask = high_entropy_mask(ent, mask, quantile)
    assert torch.equal(ours_mask, theirs_mask)
    theirs = _trl_loss("bnpo", logps, old, adv, mask, entropies=ent, top_entropy_quantile=quantile)
    ours = _ours("bnpo", logps, old, adv, mask, token_weights=ours_mask.double())
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-7)


def test_with_float64_entropies_trl_rounds_its_threshold_to_float32_and_may_drop_the_quantile_token():
    """A TRL rounding, not steadyrl's: ``get_high_entropy_mask`` takes the quantile of
    ``entropies.float()`` and compares the float64 entropies with it, so the token that *is* the
    quantile can fall below its own rounded value. steadyrl keeps ``>= quantile`` exact in the
    input's precision (float64 here); with float32 entropies the two agree (test above)."""
    _, _, _, mask, _, ent = _policy_batch(5)
    theirs = _StandIn("bnpo", ent, ent).get_high_entropy_mask(ent, mask, 0.5)
    ours = high_entropy_mask(ent, mask, 0.5)
    differ = ours ^ theirs
    assert int(differ.sum()) == 1 and bool(ours[differ].all())  # the one token TRL dropped is ours
    threshold = torch.quantile(ent[mask.bool()], 0.5)
    assert ent[differ].item() == threshold.item() < float(torch.quantile(ent[mask.bool()].float(), 0.5))


def test_trls_entropy_mask_of_an_empty_mask_selects_nothing_as_ours():
    ent = torch.rand(2, 3)
    empty = torch.zeros(2, 3)
    assert not _StandIn("bnpo", ent, ent).get_high_entropy_mask(ent, empty, 0.8).any()
    assert not high_entropy_mask(ent, empty, 0.2).any()
