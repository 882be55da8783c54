"""No function in steadyrl/ takes more than :data:`MAX_PARAMETERS` parameters (issue #43): past that,
a parameters object built once and named for what it is reads better (trainer/processing.py's
``RewardInputs`` / ``RewardSettings``, rewards/params.py, trainer/forward.py's ``LogprobSettings``,
gateway/waves.py's ``Serving``, data/prompts.py's ``PromptFormat``).

Counted: every named parameter (positional-only, positional, keyword-only) of every ``def`` and
``async def``, nested ones and methods too, the first ``self`` / ``cls`` excluded. ``*args`` /
``**kwargs`` are not counted (a reward factory's ``**options`` is checked by its typed model).

:data:`ALLOWED` is the explicit list of exceptions, each with its reason and its count today. It can
only shrink: a listed function may not grow, and an entry whose function is gone or is back within
the limit fails until it is removed."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_PARAMETERS = 8

ALLOWED = {
    # torch.autograd.Function.forward: ctx, then the inputs positionally by contract (backward returns
    # one gradient per input, in that order).
    "steadyrl/functional/logprobs.py:_FromHidden.forward": 9,
    "steadyrl/functional/logprobs_grad.py:_FromHiddenRows.forward": 10,
    # The streaming kernels those two Functions' forward / backward call in their hot loops: the same
    # saved tensors and tile geometry, positional, as the Functions hold them.
    "steadyrl/functional/logprobs.py:_forward": 10,
    "steadyrl/functional/logprobs.py:_backward": 10,
    "steadyrl/functional/logprobs_grad.py:_forward_bases": 10,
    "steadyrl/functional/logprobs_grad.py:_backward_recompute": 10,
    # Public steadyrl.functional losses: their keyword-only hyperparameters are the public API that
    # peers' losses match and the differential tests call by name.
    "steadyrl/functional/losses.py:clip_cov_policy_loss": 13,
    "steadyrl/functional/losses.py:kl_cov_policy_loss": 11,
    "steadyrl/functional/losses.py:sapo_policy_loss": 10,
    # The engine protocol: generate(prompt_ids, n, *, max_new_tokens, temperature, top_p, top_k, do_sample,
    # image inputs) as every engine and every stand-in engine of the tests implement it (a Sampling object
    # for the sampling keywords would change all of them at once: not done yet).
    "steadyrl/rollout/hf.py:HFEngine.generate": 10,
    "steadyrl/rollout/hf.py:HFEngine._generate": 9,
    "steadyrl/rollout/vllm.py:VLLMEngine.generate": 9,
    "steadyrl/rollout/base.py:Engine.generate": 9,
    # The chat-template probe's helpers: (tokenizer, history, message, new) and the rendering options they
    # pass down (tools, end texts, template kwargs); one TemplateRendering object for those is not done yet.
    "steadyrl/agents/modes.py:_turn_in": 10,
    "steadyrl/agents/modes.py:model_turn": 9,
    "steadyrl/agents/turns.py:_call_reasoning": 9,
    "steadyrl/agents/templating.py:rendered_suffix": 9,
    "steadyrl/agents/probe.py:sampled_turn": 9,
}
"""``"path:qualified name"`` -> its parameter count today (the most it may have)."""


def parameter_counts(path: Path, name: str) -> dict[str, int]:
    """``{"name:Qualified.name": count}`` of every function defined in the file at ``path``."""
    counts: dict[str, int] = {}

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                counts[f"{name}:{'.'.join(scope + [child.name])}"] = len(names)
                visit(child, scope + [child.name])
            elif isinstance(child, ast.ClassDef):
                visit(child, scope + [child.name])
            else:
                visit(child, scope)

    visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return counts


@functools.cache
def package_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in sorted((ROOT / "steadyrl").rglob("*.py")):
        counts.update(parameter_counts(path, path.relative_to(ROOT).as_posix()))
    return counts


def test_no_function_takes_more_than_eight_parameters_unless_listed():
    counts = package_counts()
    over = {key: n for key, n in counts.items() if n > MAX_PARAMETERS and key not in ALLOWED}
    assert over == {}, "group them into a parameters object built once (tests/test_signatures.py's docstring)"


def test_the_allow_list_only_shrinks():
    counts = package_counts()
    grown = {key: (counts[key], most) for key, most in ALLOWED.items() if key in counts and counts[key] > most}
    stale = sorted(key for key in ALLOWED if counts.get(key, 0) <= MAX_PARAMETERS)
    assert grown == {} and stale == [], "a listed function grew, or is gone or within the limit: update ALLOWED"


def test_the_measure_counts_methods_nested_functions_and_keyword_only_parameters(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("class A:\n    def f(self, a, b, /, c, *args, d, e=1, **kw):\n        def g(x, y): pass\n"
                    "    @classmethod\n    def h(cls, a): pass\n"
                    "async def k(a, b, c, d, e, f, g, h, i): pass\n")
    assert parameter_counts(path, "m.py") == {"m.py:A.f": 5, "m.py:A.f.g": 2, "m.py:A.h": 1, "m.py:k": 9}
