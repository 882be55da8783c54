"""``steadyrl convert GGUF OUT_DIR``: a GGUF file (llama.cpp's format, often quantised) into a
Hugging Face model directory that ``model.name_or_path`` can name.

transformers reads a GGUF (with the ``gguf`` package: ``pip install 'steadyrl[gguf]'``) and
de-quantises its weights into an ordinary causal LM, its tokenizer (vocabulary, merges, special
tokens) and its chat template. Doing that once, here, is better than at every load: the
de-quantisation takes seconds to minutes, the trainer loads the policy and the reference, and
checkpoints are written as Hugging Face directories anyway.

What is written: ``config.json`` + ``model.safetensors`` (in ``--dtype``, float32 by default: the
de-quantised values exactly), the tokenizer files with the chat template, and a
``generation_config.json`` whose ``eos_token_id`` lists every end-of-generation token the GGUF
names (``eos``, ``eot``, ``eom``), since generation and the multi-turn template probe stop on it.

Refused, with exit status 2 and a message naming the file: a missing path, a file that is not a
GGUF (the first four bytes are not ``GGUF``), a GGUF without weights (a vocabulary-only file), a
GGUF whose architecture transformers cannot load as a causal LM (an encoder such as BERT, an
encoder-decoder such as T5), a GGUF whose model dimensions are absurd or larger than its weights
(:func:`check_dimensions`: ``llama.embedding_length = 2^40`` would have transformers allocate
terabytes), and an ``OUT_DIR`` that already holds files (unless ``--overwrite``).
"""

from __future__ import annotations

import shutil
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ModelLoadError
from .gguf_header import check_header
from .model_files import share_like_the_config

GGUF_MAGIC = b"GGUF"
DTYPES = ("float32", "bfloat16", "float16")
# The GGUF keys that name a token ending generation (llama.cpp's end-of-generation set).
# llama.cpp's architecture names that transformers spells otherwise (its GGUF loader renames them).
_ARCH_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}
_END_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


@dataclass(frozen=True)
class GGUFInfo:
    """What the GGUF's own metadata says, for checks and for the generation config."""

    path: Path
    architecture: str
    name: str | None
    n_tensors: int
    bos_token_id: int | None
    end_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    chat_template: str | None = None
    dimensions: dict[str, int] = field(default_factory=dict)
    n_elements: int = 0


MAX_DIMENSION = 2 ** 24
"""Largest value a GGUF's model dimension (:data:`DIMENSION_KEYS`) may state: 16,777,216, above any
released model's (context lengths reach 10,485,760; widths 16,384; vocabularies 262,144)."""

DIMENSION_KEYS = ("embedding_length", "feed_forward_length", "expert_feed_forward_length", "block_count",
                  "context_length", "vocab_size", "attention.head_count", "attention.head_count_kv",
                  "attention.key_length", "attention.value_length", "rope.dimension_count", "expert_count",
                  "expert_used_count", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.conv_kernel",
                  "shortconv.l_cache")
"""The ``<architecture>.<key>`` values transformers builds the model from, checked before it allocates
(``ssm.*``: a Mamba's, ``ssm.inner_size`` its ``intermediate_size``; ``shortconv.l_cache``: LFM2's
convolution width)."""

WEIGHT_SLACK = 4
"""How many times the weights a GGUF's dimensions imply may exceed the elements of its tensors."""


def _import_gguf():
    try:
        import gguf
    except ImportError:
        raise ModelLoadError("reading a GGUF file needs the gguf package: pip install 'steadyrl[gguf]' "
                             "(or pip install gguf)") from None
    return gguf


def _check_accelerate() -> None:
    """transformers loads a GGUF's weights only with accelerate installed: say so before the slow part."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        raise ModelLoadError("loading a GGUF file's weights needs the accelerate package (transformers' GGUF "
                             "loader): pip install 'steadyrl[gguf]' (or pip install accelerate)")


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"GGUF file {str(path)!r}: no such file")
    if not path.is_file():
        raise ModelLoadError(f"GGUF file {str(path)!r} is a directory; give the .gguf file inside it")
    with path.open("rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise ModelLoadError(f"GGUF file {str(path)!r} is not a GGUF file: it starts with {head!r}, a GGUF "
                             f"file starts with {GGUF_MAGIC!r} (a Hugging Face directory needs no conversion: "
                             "name it in model.name_or_path)")


def _field(reader, key: str):
    found = reader.fields.get(key)
    if found is None:
        return None
    try:
        value = found.contents()
        return value.decode() if isinstance(value, bytes) else value
    except (UnicodeDecodeError, ValueError, IndexError) as exc:  # text that is not UTF-8, a malformed field
        where = getattr(reader.data, "filename", None) or "?"
        raise ModelLoadError(f"GGUF file {str(where)!r}: the metadata {key} cannot be read "
                             f"({type(exc).__name__}: {exc})") from None


def read_gguf(path: str | Path) -> GGUFInfo:
    """The metadata of a GGUF file, after checking that it is one (:class:`ModelLoadError` if not)."""
    path = Path(path).expanduser()
    _check_file(path)
    check_header(path)  # every size the header states bounded by the file's, before GGUFReader believes it
    gguf = _import_gguf()
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, KeyError, IndexError, RecursionError, MemoryError, OverflowError) as exc:
        raise ModelLoadError(f"GGUF file {str(path)!r} could not be read: {type(exc).__name__}: {exc}") from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(f"GGUF file {str(path)!r} has no general.architecture: it does not describe a model")
    ends = [int(v) for v in (_field(reader, k) for k in _END_KEYS) if v is not None]
    bos, pad = _field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.padding_token_id")
    return GGUFInfo(path=path, architecture=arch, name=_field(reader, "general.name"),
                    n_tensors=len(reader.tensors), bos_token_id=None if bos is None else int(bos),
                    end_token_ids=sorted(set(ends)), pad_token_id=None if pad is None else int(pad),
                    chat_template=_field(reader, "tokenizer.chat_template"),
                    dimensions=_dimensions(reader, arch), n_elements=sum(int(t.n_elements) for t in reader.tensors))


def _dimensions(reader, arch: str) -> dict[str, int]:
    """The model dimensions the metadata states (:data:`DIMENSION_KEYS`; a per-layer list: its
    largest), and ``tokenizer.ggml.tokens``' length as ``vocab_size`` when it is larger."""
    out = {}
    for key in DIMENSION_KEYS:
        value = _field(reader, f"{arch}.{key}")
        values = value if isinstance(value, list) else [value]
        if value is not None and values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            out[f"{arch}.{key}"] = max(values)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None and len(tokens.data) > out.get(f"{arch}.vocab_size", 0):
        out[f"{arch}.vocab_size"] = len(tokens.data)
    return out


def check_dimensions(info: GGUFInfo) -> None:
    """Refuse (:class:`ModelLoadError` naming the key) a GGUF whose metadata states a model larger
    than its weights, before transformers builds (allocates) it: every dimension at most
    :data:`MAX_DIMENSION`, and the weights the dimensions imply,
    ``block_count * embedding * (embedding + feed_forward) + embedding * vocab``
    (a lower bound on a transformer's: its attention and feed-forward matrices, one embedding),
    plus, for a Mamba, ``block_count * ssm_inner * (embedding + time_step_rank + 2 * state +
    conv_kernel)`` (its in/out projections, x_proj, conv1d), for LFM2, ``block_count *
    embedding * l_cache``, and for a mixture of experts ``block_count * expert_count * embedding *
    max(embedding, expert_feed_forward)`` (``feed_forward`` where it states none: transformers builds
    every expert, for Qwen MoEs at its own default width whatever the file states; released MoEs'
    experts are at least a quarter of the embedding wide), at most :data:`WEIGHT_SLACK` times the
    elements its tensors hold (plus 2^20). The width and the layer count bound nothing when they are
    0 or missing (transformers then builds its default width, 4,096), so both must be stated, the
    width at least 1 and the layers at most the file's tensors (a layer holds at least one):
    :func:`_check_width_and_layers`."""
    where = f"GGUF file {str(info.path)!r}"
    for key, value in info.dimensions.items():
        if not 0 <= value <= MAX_DIMENSION:
            raise ModelLoadError(f"{where}: {key} = {value:,} is not a model dimension steadyrl builds (at most "
                                 f"{MAX_DIMENSION:,}); refused before the model is allocated")
    _check_width_and_layers(info, where)
    dim = {k.split(".", 1)[1]: v for k, v in info.dimensions.items()}
    width = dim.get("embedding_length", 0)
    blocks, inner = dim.get("block_count", 0), dim.get("ssm.inner_size", 0)
    implied = (blocks * width * (width + dim.get("feed_forward_length", 0)) + width * dim.get("vocab_size", 0)
               + blocks * inner * (width + dim.get("ssm.time_step_rank", 0) + 2 * dim.get("ssm.state_size", 0)
                                   + dim.get("ssm.conv_kernel", 0))
               + blocks * width * dim.get("shortconv.l_cache", 0)
               + blocks * dim.get("expert_count", 0) * width * max(width, dim.get("expert_feed_forward_length", 0)
                                                                  or dim.get("feed_forward_length", 0)))
    if implied > WEIGHT_SLACK * info.n_elements + 2 ** 20:
        stated = ", ".join(f"{k} = {v:,}" for k, v in info.dimensions.items()
                           if k.split(".", 1)[1] in ("embedding_length", "feed_forward_length", "block_count",
                                                      "vocab_size", "ssm.inner_size", "ssm.state_size",
                                                      "expert_count", "expert_feed_forward_length"))
        raise ModelLoadError(f"{where}: its metadata ({stated}) implies at least {implied:,} weights, but its "
                             f"tensors hold {info.n_elements:,}; the dimensions do not describe this file's "
                             "weights, refused before the model is allocated")


def _check_width_and_layers(info: GGUFInfo, where: str) -> None:
    """``<arch>.embedding_length`` and ``<arch>.block_count`` stated, the width at least 1, the
    layers at most :attr:`GGUFInfo.n_tensors` (:func:`check_dimensions`)."""
    for key in ("embedding_length", "block_count"):
        if f"{info.architecture}.{key}" not in info.dimensions:
            raise ModelLoadError(f"{where}: its metadata states no {info.architecture}.{key} (an integer): "
                                 "transformers would build its default instead of this file's model; refused "
                                 "before the model is allocated")
    width = info.dimensions[f"{info.architecture}.embedding_length"]
    blocks = info.dimensions[f"{info.architecture}.block_count"]
    if width < 1:
        raise ModelLoadError(f"{where}: {info.architecture}.embedding_length = {width:,} is not a model width (at "
                             "least 1); refused before the model is allocated")
    if blocks > info.n_tensors:
        raise ModelLoadError(f"{where}: {info.architecture}.block_count = {blocks:,} layers, but the file holds "
                             f"{info.n_tensors:,} tensors (a layer is at least one); refused before the model is "
                             "allocated")


@contextmanager
def _quiet_transformers():
    """transformers warns while it validates placeholder configs (gpt2's token ids in a smaller
    vocabulary): noise for the user, who gets the converted model's own config."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


_PARSING = threading.RLock()
"""Held by a conversion while gguf's ``GGUFReader`` / ``get_tensor_name_map`` are its caching ones."""


@contextmanager
def _parsed_once():
    """Within the block, one ``gguf.GGUFReader`` per file and one tensor-name map per architecture.

    A conversion reads the GGUF four times (its metadata here, then transformers for the config,
    the tokenizer and the weights, a ``GGUFReader`` each: some 4 s apiece for a 49k-token
    vocabulary) and builds gguf's tensor-name map once per module of the model (hundreds of
    times). A reader is a read-only memory map and a name map a read-only table, so both are made
    once and shared; measured on SmolLM2-135M's Q4_1 GGUF, the conversion took 37 s before. The
    names are gguf's module attributes, so one conversion at a time holds them (:data:`_PARSING`):
    a second one entering meanwhile would take the first's caching names for gguf's own and put them
    back last, for every later reader of the process."""
    with _PARSING:
        gguf = _import_gguf()
        real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict = {}
        maps: dict = {}

        def reader(path, mode="r"):
            key = (str(Path(path).resolve()), mode)
            if key not in readers:
                readers[key] = real_reader(path, mode)
            return readers[key]

        def name_map(arch, n_blocks):
            if (arch, n_blocks) not in maps:
                maps[arch, n_blocks] = real_map(arch, n_blocks)
            return maps[arch, n_blocks]

        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def causal_lm_architectures() -> list[str]:
    """The GGUF architectures transformers de-quantises into a causal LM."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    causal = []
    with _quiet_transformers():
        for arch in GGUF_SUPPORTED_ARCHITECTURES:
            model_type = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}.get(arch, arch)
            try:
                model_type = AutoConfig.for_model(model_type).model_type
            except ValueError:
                continue
            if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
                causal.append(arch)
    return sorted(causal)


def check_causal_lm(info: GGUFInfo) -> None:
    """Refuse a GGUF that would not become a causal LM, before the slow de-quantisation."""
    where = f"GGUF file {str(info.path)!r}"
    if info.n_tensors == 0:
        raise ModelLoadError(f"{where} holds no weights (a vocabulary-only file?): it is not a causal LM")
    if _ARCH_ALIASES.get(info.architecture, info.architecture.replace("-", "_")) in causal_lm_architectures():
        check_dimensions(info)  # an architecture's own dimensions: after it is known to be one
        return
    raise ModelLoadError(f"{where} is not a causal LM that transformers can load: general.architecture = "
                         f"{info.architecture!r}; steadyrl converts these GGUF architectures: "
                         f"{', '.join(causal_lm_architectures())}")


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ModelLoadError(f"OUT_DIR {str(out_dir)!r} is a file; give a directory to write the model into")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ModelLoadError(f"OUT_DIR {str(out_dir)!r} is not empty; pass --overwrite to replace it")


def _generation_config(info: GGUFInfo, tokenizer):
    from transformers import GenerationConfig

    ends = info.end_token_ids or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    pad = info.pad_token_id if info.pad_token_id is not None else (ends[0] if ends else None)
    return GenerationConfig(bos_token_id=info.bos_token_id, pad_token_id=pad,
                            eos_token_id=ends[0] if len(ends) == 1 else ends or None)


def load_gguf(info: GGUFInfo, dtype: str = "float32"):
    """``(model, tokenizer)`` de-quantised from the GGUF; the weights are copied into a fresh
    model built from the config, so what is saved is a plain model with no trace of the GGUF
    loading path (``save_pretrained`` of the loaded one is not reliable)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _import_gguf()
    _check_accelerate()
    torch_dtype = getattr(torch, dtype)
    folder, name = str(info.path.parent), info.path.name
    try:
        with _quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
    except (ValueError, KeyError, OSError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"GGUF file {str(info.path)!r} could not be converted: "
                             f"{type(exc).__name__}: {first}") from None
    except RuntimeError as exc:  # transformers' "size mismatch" (its report is among the warnings silenced)
        if "mismatched_sizes" not in str(exc) and "size mismatch" not in str(exc):
            raise
        stated = ", ".join(f"{k} = {v}" for k, v in info.dimensions.items())
        raise ModelLoadError(f"GGUF file {str(info.path)!r} could not be converted: its tensors' shapes do not "
                             f"match the model its metadata states ({stated}); the file is damaged or its "
                             "metadata belongs to another model") from None
    config = loaded.config
    config.architectures = [type(loaded).__name__]
    for key in ("quantization_config", "_model_name_or_path"):  # the GGUF loading path, not the model
        if hasattr(config, key):
            delattr(config, key)
    fresh = type(loaded)(config).to(torch_dtype)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = _generation_config(info, tokenizer)
    return fresh.eval(), tokenizer


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, dtype: str = "float32",
                 overwrite: bool = False) -> Path:
    """Write the GGUF's model, tokenizer, chat template and generation config to ``out_dir``."""
    if dtype not in DTYPES:
        raise ModelLoadError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    with _parsed_once():
        info = read_gguf(gguf_path)
        check_causal_lm(info)
        out = Path(out_dir).expanduser()
        _check_out_dir(out, overwrite)  # before the slow part
        model, tokenizer = load_gguf(info, dtype)
    if out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    share_like_the_config(out)  # safetensors writes 0600
    return out
