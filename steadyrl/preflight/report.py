"""The pre-flight's text (``steadyrl doctor CONFIG``) and its command-line entry: a healthy setup in
one line; the run's rewards on the sampled batches (a reward failing on every sample comes first,
exit 1); otherwise the gap, the mismatch metrics, and the causes ranked by their share of the gap,
each with its evidence and the config change that removes it. Exit 0 healthy, 1 a cause found."""

from __future__ import annotations

from pathlib import Path

from .gap import TOLERANCE, Preflight


def render(result: Preflight, rewards: list[str] = ()) -> str:
    ruled = "; ".join(result.ruled_out) or "nothing"
    scored = f" Rewards on the sampled completions: {'; '.join(rewards)}." if rewards else ""
    if result.healthy:
        return (f"healthy: {result.setup}: engine and trainer agree, mean |log-ratio| {result.baseline:.3g} per "
                f"token over {result.tokens} sampled tokens (tolerance {result.tolerance:g}); ruled out: {ruled}."
                f"{scored}\n")
    m = result.metrics
    lines = [f"# steadyrl doctor (pre-flight): {result.setup}", "",
             f"Gap between the engine's sampling distribution and the trainer's log-probs: mean |log-ratio| "
             f"{result.baseline:.4g} per token over {result.tokens} sampled tokens (tolerance {result.tolerance:g}).",
             f"Engine-reported log-probs ({result.reported}) against the trainer's: "
             + ", ".join(f"{k} {v:.4g}" for k, v in m.items()) + ".", "",
             f"{len(result.causes)} cause(s), largest share first:", ""]
    for i, c in enumerate(result.causes, 1):
        lines += [f"{i}. {c.title} (`{c.name}`): {100 * c.share:.0f}% of the gap ({c.gap:.4g} per token)",
                  f"   - evidence: {c.evidence}", f"   - change: {c.change}"]
    if len(result.causes) > 1 or any(c.gap < 0 for c in result.causes):
        listed = sum(c.share for c in result.causes)
        lines += ["", f"The shares are signed Shapley values of the factors (a negative one reduces the gap: that "
                  f"factor offsets another); with the ruled-out ones they sum to the gap (listed: {100 * listed:.0f}%)."]
    lines += ["", f"Ruled out: {ruled}.{scored}"]
    return "\n".join(lines) + "\n"


def preflight_cli(config_path: str, overrides: list[str], *, output: str | None = None, batches: int = 2,
                  prompts: int = 2, tolerance: float = TOLERANCE, trust_run_code: bool = False) -> int:
    """Load ``config_path`` (+ ``overrides``), run the pre-flight, print (or write) its text."""
    from ..config import load_config
    from ..errors import ConfigError
    from ..run.trust import check_config_code
    from .attribution import attribute
    from .gap import build_side, reward_check

    for name, value in (("--batches", batches), ("--prompts", prompts)):
        if value < 1:
            raise ConfigError(f"{name} {value}: give a whole number >= 1")
    if not tolerance > 0:
        raise ConfigError(f"--tolerance {tolerance}: give a number > 0")
    config = load_config(config_path, overrides)
    # any config file may be someone else's, marker or not: its code loads only when trusted (steadyrl.run.trust)
    check_config_code(config, Path(config_path), trust_run_code, who=f"doctor {config_path!r}",
                      instead="or set what you trust on the command line (key=value)")
    if config.trainer.num_threads:
        import torch

        torch.set_num_threads(config.trainer.num_threads)
    side = build_side(config, batches=batches, prompts=prompts)
    setup = (f"{config_path}: model {config.model.name_or_path}, engine {config.rollout.engine} in "
             f"{str(side.spec.dtype).removeprefix('torch.')}, trainer in "
             f"{str(next(side.trainer.parameters()).dtype).removeprefix('torch.')}; "
             f"{batches} batch(es) x {prompts} prompt(s) x {config.rollout.group_size} samples")
    failing, scored = reward_check(side)
    result = attribute(side, tolerance, setup)
    # a reward that fails on every sample is the first thing to fix: said before the gap
    text = "".join(f"doctor: {problem}\n" for problem in failing) + render(result, scored)
    if output is None:
        print(text, end="")
    else:
        Path(output).write_text(text, encoding="utf-8")
        first = failing[0] if failing else result.causes[0].title if result.causes else None
        print(f"{output}: " + (f"{len(result.causes)} cause(s), first: {first}" if first else "healthy"))
    return 0 if result.healthy and not failing else 1
