"""steadyrl.demo: the built-in task that ``steadyrl train`` runs when given no config.

Everything is built locally, nothing is downloaded: a character tokenizer (:mod:`.tokenizer`), a
two-layer Llama-style model (:mod:`.model`), a string-reversal task with its reward
(:mod:`.task`) and a short supervised warm start (:mod:`.warmstart`). The settings measured to
make GRPO lift held-out accuracy from ~30% to over 90% in two to three minutes on two CPU cores are
the defaults of the config's ``demo`` section and of ``steadyrl.config.presets.DEMO_CONFIG``.
"""

from ..lazy import lazy_attributes

# name -> submodule, imported on first use: the tool demo's calculator (``steadyrl.demo.calculator``)
# is loaded again in every fresh tool worker, which must not pay for torch and transformers.
_LAZY = {
    "build_tiny_model": "model",
    **{name: "task" for name in ("LETTERS", "SEPARATOR", "VOCAB_CHARS", "exact_match_accuracy", "format_prompt",
                                 "generate_completions", "make_splits", "reverse_reward")},
    "build_char_tokenizer": "tokenizer",
    "encode_supervised": "warmstart",
    "warm_start": "warmstart",
}

__all__ = [
    "build_char_tokenizer",
    "build_tiny_model",
    "LETTERS",
    "SEPARATOR",
    "VOCAB_CHARS",
    "format_prompt",
    "make_splits",
    "reverse_reward",
    "generate_completions",
    "exact_match_accuracy",
    "encode_supervised",
    "warm_start",
]

__getattr__ = lazy_attributes(__name__, _LAZY, globals())
