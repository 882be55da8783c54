"""Render a resolved config as commented YAML: every key, its value, and its help text.

Values a preset filled are marked ``[preset]``, so nothing the preset chose is hidden. A built-in
reward's options are listed one a line with their help (:mod:`.reward_options`); those left at their
default are commented out (``# workers: 4``), so the text loads back to the same config. Secrets
in a reward's options, and any text holding one, are shown as ``<redacted>`` (:mod:`steadyrl.secrets`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..secrets import redact_secrets, secret_values
from .loading import yaml_dump
from .reward_options import REWARD_OPTIONS
from .schema import Config, RewardConfig


def _scalar(value: Any) -> str:
    """``value`` as YAML on one line (a string with a line break is double-quoted with escapes)."""
    style = '"' if isinstance(value, str) and not value.isprintable() else None
    text = yaml_dump(value, default_flow_style=True, width=10_000, default_style=style, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _render(model: BaseModel, indent: int, prefix: str, preset_keys: set[str], out: list[str],
            secrets: set[str]) -> None:
    pad = "  " * indent
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}{name}"
        help_text = (field.description or "").strip()
        if isinstance(value, BaseModel):
            doc = (type(value).__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
            out.append(f"{pad}{name}:" + (f"  # {doc}" if doc and "Field" not in doc else ""))
            _render(value, indent + 1, path + ".", preset_keys, out, secrets)
            continue
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            out.append(f"{pad}{name}:  # {help_text}")
            for item in value:
                out.append(f"{pad}  -")
                _render(item, indent + 2, path + "[].", preset_keys, out, secrets)
            continue
        if isinstance(model, RewardConfig) and name == "options" and model.name.strip() in REWARD_OPTIONS:
            out.append(f"{pad}{name}:{'' if value else ' {}'}  # {help_text}")  # all commented out: {}
            _render_options(model.name.strip(), value, pad + "  ", out, secrets)
            continue
        if isinstance(value, (dict, list, str)):  # a reward's options may hold an api_key, another text its value
            value = redact_secrets(value, secrets)
        tag = " [preset]" if path in preset_keys else ""
        comment = f"  # {help_text}{tag}" if help_text or tag else ""
        out.append(f"{pad}{name}: {_scalar(value)}{comment}")


def _render_options(reward: str, options: dict, pad: str, out: list[str], secrets: set[str]) -> None:
    """Every option of built-in ``reward``: the given ones, then the others commented out at their default."""
    fields = REWARD_OPTIONS[reward].model_fields
    for key, value in options.items():
        help_text = fields[key].description if key in fields else ""
        out.append(f"{pad}{key}: {_scalar(redact_secrets(value, secrets))}" + (f"  # {help_text}" if help_text else ""))
    for key, field in fields.items():
        if key not in options:
            default = "required" if field.is_required() else _scalar(field.get_default())
            out.append(f"{pad}# {key}: {default}  # {' '.join((field.description or '').split())}")


def render_config(config: Config, preset_keys: set[str] | None = None) -> str:
    """The whole config as YAML with a help comment on every key (loadable back with YAML)."""
    out: list[str] = []
    _render(config, 0, "", preset_keys or set(), out, secret_values(config.model_dump()))
    out.extend(precision_comment(config))
    return "\n".join(out) + "\n"


def precision_comment(config: Config) -> list[str]:
    """Comment lines: what ``model.dtype`` / ``model.bf16_update`` store, compute, update and sample
    in, on a CUDA GPU and on the CPU (docs/precision.md)."""
    from ..precision import precision_plan

    m = config.model
    out = [f"# precision of model.dtype={m.dtype}, model.bf16_update={m.bf16_update} (docs/precision.md):"]
    for device in ("cuda", "cpu"):
        if m.dtype == "float16" and device == "cpu":
            out.append("#   on cpu: refused (model.dtype float16 overflows to NaN when sampling on the CPU)")
            continue
        plan = precision_plan(m.dtype, m.bf16_update, device, rollout_dtype=config.rollout.dtype)
        out.append(f"#   on {device}: {plan.describe()}")
    return out
