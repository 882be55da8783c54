"""The pre-flight's attribution: the engine's side rescored with factors set to the trainer's one at a
time (sampling processors, precision, attention, padding side, weights), the template round trip, and
the ranked causes with their signed share of the gap and the config change that removes each
(formula: :mod:`.gap`)."""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch

from ..functional.mismatch import mismatch_metrics
from .engine_side import engine_model, weights_match
from .gap import TOLERANCE, Cause, Preflight, gap_sum, GapSide
from .roundtrip import round_trip

FACTORS = ("sampling", "precision", "attention", "padding", "stale_weights")


def _dtype(model) -> torch.dtype:
    return next(model.parameters()).dtype


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _present(side: GapSide) -> dict[str, tuple[str, str, str]]:
    """``name -> (title, evidence, change)`` of every factor where the engine differs from the trainer."""
    spec, cfg, out = side.spec, side.config, {}
    if spec.truncates:
        told = "reports them" if spec.reported == "processed" else "reports the untruncated ones"
        out["sampling"] = ("Sampling parameters (top-k / top-p)",
                           f"the engine samples from softmax(logits / {spec.temperature:g}) truncated by "
                           f"top_k={spec.top_k}, top_p={spec.top_p:g} and {told}; the trainer's log-probs are of "
                           "the whole softmax",
                           f"rollout.top_k=0 rollout.top_p=1.0 (now {spec.top_k}, {spec.top_p:g}): sample from "
                           "the distribution the trainer scores")
    if spec.dtype != _dtype(side.trainer):
        out["precision"] = ("Precision (engine dtype)",
                            f"the engine computes in {_name(spec.dtype)}, the trainer in {_name(_dtype(side.trainer))}",
                            f"rollout.dtype=null (now {getattr(cfg.rollout, 'dtype', None)}): the engine samples in "
                            "the trainer's model.dtype; or keep it and correct the gap (docs/stability.md)")
    trainer_attn = getattr(side.trainer.config, "_attn_implementation", None)
    if spec.attn != trainer_attn:
        out["attention"] = ("Attention implementation", f"the engine attends with {spec.attn}, the trainer with "
                            f"{trainer_attn}", f"the same kernel on both sides: model.attn_implementation="
                            f"{trainer_attn} for the engine too")
    if spec.padding_side != "left":
        out["padding"] = ("Padding side", f"the engine pads prompts on the {spec.padding_side}, the trainer on "
                          "the left", "pad prompts on the left for generation (tokenizer.padding_side = 'left')")
    same, a, b = weights_match(side.engine, side.trainer)
    if not same:
        out["stale_weights"] = ("Stale weights (engine != trainer)",
                                f"checksum of the engine's weights {a} != the trainer's {b} (cast to the "
                                "engine's dtype)", "push the trainer's weights to the engine after every update "
                                "(engine.update_weights) before it samples again")
    return out


def _gap_with(side: GapSide, kept: set[str], n: int) -> float:
    """G of an engine that keeps the factors in ``kept`` and matches the trainer in the others."""
    spec, trainer = side.spec, side.trainer
    sub = spec.with_(top_k=spec.top_k if "sampling" in kept else 0, top_p=spec.top_p if "sampling" in kept else 1.0,
                     dtype=spec.dtype if "precision" in kept else _dtype(trainer),
                     attn=spec.attn if "attention" in kept else getattr(trainer.config, "_attn_implementation", None),
                     padding_side=spec.padding_side if "padding" in kept else "left")
    source = side.weights if "stale_weights" in kept and side.weights is not None else trainer
    return gap_sum(side, engine_model(source, sub), sub)[0] / max(n, 1)


def _round_trip_cause(side: GapSide) -> tuple[Cause | None, str]:
    from ..rollout import eos_token_ids

    eos = set(eos_token_ids(side.tokenizer, side.trainer))
    trips = [round_trip(side.trainer, side.tokenizer, g, side.chats[i * len(g): (i + 1) * len(g)], eos)
             for i, g in enumerate(side.gens)]
    changed, samples = sum(t.changed for t in trips), sum(t.samples for t in trips)
    gap = sum(t.gap * t.samples for t in trips) / max(samples, 1)
    if not changed:
        return None, f"template round trip ({samples} of {samples} samples re-encode to the sampled ids)"
    sampled, again = next(t.example for t in trips if t.example)
    i = next((k for k, (x, y) in enumerate(zip(sampled, again)) if x != y), min(len(sampled), len(again)))
    shown = (f"; first: sampled {sampled[i:i + 4]} ({side.tokenizer.decode(sampled[i:i + 4])!r}) re-encode as "
             f"{again[i:i + 4]}")
    cause = Cause("template", "Chat-template round trip", gap,
                  f"{changed} of {samples} samples do not come back as the sampled ids when their text is "
                  f"rendered and encoded again{shown}",
                  "keep token ids end to end (steadyrl's episodes do; a gateway or a re-tokenizing trainer does "
                  "not), or fix data.chat_template / the tokenizer so the sampled turn renders back to its ids")
    return cause, f"template round trip (changes {changed} of {samples} samples, {gap:.2g} per token)"


def shapley_gaps(names: list[str], value: Callable[[frozenset], float]) -> dict[str, float]:
    """Each factor's exact Shapley value in the game ``value(kept factors) -> G``: its marginal gain
    ``value(S + f) - value(S)`` weighted by ``|S|! (n - |S| - 1)! / n!`` over the subsets ``S`` of the
    others. Signed (a factor that offsets another is negative); they sum to ``value(all) -
    value(none)``. ``2^n`` calls of ``value`` (cached), ``n`` at most 5 here."""
    cache: dict[frozenset, float] = {}

    def v(kept: frozenset) -> float:
        if kept not in cache:
            cache[kept] = float(value(kept))
        return cache[kept]

    n, out = len(names), {}
    for f in names:
        others = [x for x in names if x != f]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            total += weight * math.fsum(v(frozenset(s) | {f}) - v(frozenset(s))
                                        for s in itertools.combinations(others, size))
        out[f] = total
    return out


def _factor_causes(side: GapSide, present: dict, baseline: float, n: int, tolerance: float):
    """``(causes, ruled out, matched)``: each present factor's signed Shapley gap (module formula)."""
    names = list(present)
    game = {frozenset(names): baseline}
    value = lambda kept: game.setdefault(kept, _gap_with(side, set(kept), n))  # noqa: E731
    matched = value(frozenset()) if names else baseline
    phi = shapley_gaps(names, value)
    causes, ruled_out = [], []
    for name, (title, evidence, change) in present.items():
        without, alone = value(frozenset(names) - {name}), value(frozenset({name}))
        if phi[name] < 0:  # the factor offsets another: setting it to the trainer's would not help
            change = (f"none: it reduces the gap; setting it to the trainer's would widen the gap by "
                      f"{-phi[name]:.4g} per token (it offsets another cause)")
        cause = Cause(name, title, phi[name], f"{evidence}; the gap is {baseline:.4g} with it and {without:.4g} "
                      f"without it (alone: {alone:.4g} against {matched:.4g} with none)", change)
        (causes if abs(phi[name]) >= tolerance else ruled_out).append(cause)
    if not any(c.gap > 0 for c in causes):  # an offset with nothing it offsets worth naming
        ruled_out, causes = ruled_out + causes, []
    return causes, [f"{c.title.lower()} ({c.gap:.2g} per token)" for c in ruled_out], matched


def attribute(side: GapSide, tolerance: float = TOLERANCE, setup: str = "") -> Preflight:
    """Measure, attribute and rank (formula: :mod:`.gap`)."""
    total, n = gap_sum(side, side.engine, side.spec)
    baseline = total / max(n, 1)
    shown_total, _ = gap_sum(side, side.engine, side.spec, reported=True)
    present = _present(side)
    names = set(present)
    causes, ruled_out, matched = _factor_causes(side, present, baseline, n, tolerance)
    if names and matched >= tolerance:
        causes.append(Cause("unexplained", "Not explained by these factors", matched,
                            "the gap that remains when the engine matches the trainer in every factor above "
                            "(kernels, the decode path)", "correct the gap (docs/stability.md)"))
    trip, line = _round_trip_cause(side)
    whole = baseline
    if trip is not None and trip.gap >= tolerance:
        causes.append(trip)
        whole += trip.gap  # the round trip's gap is measured on its own, beside the engine's
    else:
        ruled_out.append(line)
    for c in causes:  # signed shares of the whole: with the ruled-out ones they sum to 1
        c.share = c.gap / whole if whole > 0 else 0.0
    causes.sort(key=lambda c: -c.gap)
    absent = {"sampling": "sampling parameters (no top-k / top-p)", "precision": "precision (same dtype)",
              "padding": "padding side (left)", "stale_weights": "stale weights (checksums equal)"}
    ruled_out += [text for name, text in absent.items() if name not in names]
    if not names and baseline >= tolerance:  # no factor differs, yet the numbers do
        causes.insert(0, Cause("unexplained", "Not explained by these factors", baseline, "the engine matches the "
                               "trainer in every factor checked (kernels, the decode path)",
                               "correct the gap (docs/stability.md)", baseline / whole if whole > 0 else 1.0))
    return Preflight(setup=setup, tokens=n, baseline=baseline, metrics=_metrics(side),
                     reported=f"{side.spec.reported}: mean |log-ratio| {shown_total / max(n, 1):.4g} per token",
                     causes=causes, ruled_out=ruled_out, tolerance=tolerance)


def _metrics(side: GapSide) -> dict[str, float]:
    """:func:`~steadyrl.functional.mismatch_metrics` of the engine's reported log-probs against the
    trainer's over every sampled token (all batches together)."""
    from .engine_side import behaviour_logprobs

    width = max(g.response_ids.shape[1] for g in side.gens)
    pad = lambda t: torch.nn.functional.pad(t.float(), (0, width - t.shape[1]))  # noqa: E731
    shown = [behaviour_logprobs(side.engine, g, side.spec)[1] for g in side.gens]
    metrics = mismatch_metrics(torch.cat([pad(t) for t in side.trainer_logprobs]), torch.cat([pad(t) for t in shown]),
                               torch.cat([pad(g.response_mask) for g in side.gens]), prefix="")
    return {k: float(v) for k, v in metrics.items() if k in ("k1", "k3", "ppl_ratio", "ess", "ratio_max", "ratio_min")}
