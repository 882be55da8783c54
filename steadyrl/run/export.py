"""The trained policy as a plain Hugging Face model directory: ``final/`` and ``steadyrl export``.

A run's checkpoints rotate (``trainer.keep_checkpoints``) and hold optimizer state besides the
model; what a user wants at the end is one directory that ``AutoModelForCausalLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` read as they are. :func:`export_checkpoint` writes one from a
checkpoint's ``policy/``:

* the weights (safetensors), model config, tokenizer files and a ``generation_config.json``
  (made from the model config when the checkpoint has none);
* for a LoRA run, with ``merge_lora``: the adapter merged into the base model's weights (loaded
  from the run's ``model.name_or_path``), and the adapter itself kept in ``adapter/``; without it,
  the adapter directory alone (load it with PEFT on top of the base model).

``train`` writes ``final/`` in the run directory from its last checkpoint (LoRA merged), and the
closing ``done:`` line names it. Writing is atomic: a temporary directory renamed when complete.
An existing ``OUT`` is replaced only with ``overwrite`` (``steadyrl export --overwrite``; train's
own ``final/`` is). Links are never followed: only the regular files of the checkpoint's
``policy/`` are copied (:func:`steadyrl.files.regular_files`), and a link there is refused, naming
it: ``policy/notes.txt -> ~/.cache/huggingface/token`` would otherwise copy (and, with
``--push-to-hub``, publish) the file it points to.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import ConfigError
from ..files import first_link, regular_files
from ..gguf_model import model_source
from ..model_files import share_like_the_config
from . import checkpoint as ckpt

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def find_checkpoint(run_dir: Path, step: int | None) -> Path:
    """``run_dir``'s checkpoint of ``step`` (``None``: the newest); a :class:`ConfigError` naming
    the checkpoints there when it has none or not that one."""
    found = ckpt.list_checkpoints(run_dir / "checkpoints")
    if not found:
        raise ConfigError(f"run directory {str(run_dir)!r} has no checkpoint (checkpoints/step_N): nothing to export")
    if step is None:
        return found[-1]
    for path in found:
        if int(path.name.split("_")[1]) == step:
            return path
    steps = ", ".join(str(int(p.name.split("_")[1])) for p in found)
    raise ConfigError(f"--step {step}: {str(run_dir)!r} has no checkpoint of that step; it has step(s) {steps} "
                      "(older ones are pruned: trainer.keep_checkpoints)")


def is_lora(policy_dir: Path) -> bool:
    return (policy_dir / "adapter_config.json").is_file()


def refuse_links(folder: Path) -> None:
    """:class:`ConfigError` naming the first symbolic link under ``folder`` (or ``folder`` itself)."""
    link = first_link(folder)
    if link is not None:
        raise ConfigError(f"{str(link)!r} is a symbolic link: steadyrl never follows a link inside a run directory "
                          "(export would copy or upload the file it points to); remove the link")


def _copy_regular(src: Path, dst: Path) -> None:
    """``src``'s regular files into a new ``dst``, links refused (:func:`refuse_links`)."""
    refuse_links(src)
    dst.mkdir(parents=True)
    for rel in regular_files(src):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst / rel, follow_symlinks=False)


def export_checkpoint(checkpoint: Path, out: Path, *, merge_lora: bool, base: str | None = None,
                      revision: str | None = None, trust_remote_code: bool = False,
                      overwrite: bool = True) -> Path:
    """Write ``checkpoint``'s policy to ``out`` as a plain HF model directory; an existing ``out``
    is replaced only with ``overwrite`` (else a :class:`ConfigError` naming it);
    ``base``: the LoRA base model (default: the adapter's ``base_model_name_or_path``)."""
    policy = checkpoint / "policy"
    if not policy.is_dir() or policy.is_symlink():
        raise ConfigError(f"checkpoint {str(checkpoint)!r} has no policy/ directory: nothing to export")
    refuse_links(policy)
    out = Path(out)
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise ConfigError(f"OUT {str(out)!r} already exists: pass --overwrite to replace it, or choose another OUT")
    if out.is_symlink():
        raise ConfigError(f"OUT {str(out)!r} is a symbolic link: export replaces a directory of its own only")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if is_lora(policy) and merge_lora:
            _merge_lora(policy, tmp, base, revision, trust_remote_code)
        else:
            _copy_regular(policy, tmp)
            if not is_lora(policy):
                _ensure_generation_config(tmp)
    except BaseException:  # nothing half-written is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    share_like_the_config(tmp)  # 0644 like the other files (safetensors writes 0600; older checkpoints kept it)
    if out.exists():
        old = out.parent / f".old-{out.name}-{os.getpid()}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    return out


def _ensure_generation_config(directory: Path) -> None:
    """A ``generation_config.json`` (the token ids of the model config) where the save made none."""
    if (directory / "generation_config.json").is_file():
        return
    from transformers import AutoConfig, GenerationConfig

    GenerationConfig.from_model_config(AutoConfig.from_pretrained(directory)).save_pretrained(directory)


def _config_dtype(base: str, revision: str | None, trust_remote_code: bool):
    """The precision the base model is stored in (its config's ``dtype``), or ``None``."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base, revision=revision, trust_remote_code=trust_remote_code)
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    value = getattr(torch, value, None) if isinstance(value, str) else value
    return value if isinstance(value, torch.dtype) else None


def write_final(config, run_dir: Path) -> Path | None:
    """``run_dir/final``: the newest checkpoint's policy, LoRA merged into the run's base model
    (the built-in demo's: the warm-started model its adapter names). A failure is printed with
    the command that retries it, and ``None`` returned: the run itself is complete."""
    m = config.model
    try:
        return export_checkpoint(find_checkpoint(run_dir, None), run_dir / "final",
                                 merge_lora=True, base=model_source(config),
                                 revision=m.revision, trust_remote_code=m.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - the checkpoints are written; say how to try again
        print(f"steadyrl: could not write {run_dir / 'final'} ({type(exc).__name__}: {exc}); the checkpoints "
              f"are complete: steadyrl export {run_dir} OUT --merge-lora", flush=True)
        return None


PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja", "chat_template.json",
                   "video_preprocessor_config.json")
"""The files a vision-language model's processor adds to its tokenizer's (copied into a merged model)."""


def _merge_lora(policy: Path, out: Path, base: str | None, revision: str | None, trust_remote_code: bool) -> None:
    import json

    import torch
    from transformers import AutoTokenizer

    from ..models import load_policy

    try:
        from peft import PeftModel
    except ImportError:
        raise ConfigError("merging a LoRA adapter needs the peft extra: pip install 'steadyrl[peft]'") from None
    base = base or json.loads((policy / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"{str(policy)!r}: the adapter names no base model; give the run's model.name_or_path")
    saved_dtype = _config_dtype(base, revision, trust_remote_code)
    model = load_policy(base, dtype=torch.float32, device=torch.device("cpu"), revision=revision,
                        trust_remote_code=trust_remote_code)
    merged = PeftModel.from_pretrained(model, str(policy)).merge_and_unload()
    if isinstance(saved_dtype, torch.dtype):  # the base model's own precision, merged in float32
        merged = merged.to(saved_dtype)
    merged.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(policy).save_pretrained(out)
    for name in PROCESSOR_FILES:  # a vision-language model's processor (image processor, chat template)
        if (policy / name).is_file() and not (policy / name).is_symlink():
            shutil.copy2(policy / name, out / name)
    _ensure_generation_config(out)
    (out / "adapter").mkdir()
    for name in os.listdir(policy):  # the adapter as trained, with its tokenizer (links refused above)
        if (policy / name).is_file() and not (policy / name).is_symlink():
            shutil.copy2(policy / name, out / "adapter" / name)
