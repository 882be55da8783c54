"""Real chat templates for the conformance suite: downloaded once, cached, shared by tests and tools.

The source distribution of ``llama-cpp-python`` (pinned: ``SDIST_VERSION``) vendors the llama.cpp
tree, whose ``vendor/llama.cpp/models/templates/*.jinja`` are the chat templates models publish.
``template_dir()`` fetches it with ``pip download --no-deps --no-binary :all:`` (nothing is built),
extracts only the templates into the cache (``$STEADYRL_TEST_CACHE`` or
``~/.cache/steadyrl/tests/``) and returns their folder; a file lock keeps two test processes from
downloading at once. ``TemplatesUnavailable`` says why when the download is impossible (no
network), and tests skip with that reason.

``real_tokenizer`` loads one of the sdist's real BPE vocabularies (Qwen2, Llama-3), for checks at
the level of real tokens. ``FAMILIES`` names, for each model family of issue 21 the sdist has, its template file and what
the model ships beside it (its special tokens and its generation config's stop tokens);
``family_tokenizer`` wraps the template on a byte-level tokenizer carrying those tokens.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SDIST_VERSION = "0.3.36"
TEMPLATES_IN_SDIST = "vendor/llama.cpp/models/templates/"
VOCABS = {"qwen2": "ggml-vocab-qwen2.gguf", "llama-bpe": "ggml-vocab-llama-bpe.gguf"}
"""Real BPE vocabularies (and merges) the sdist holds as GGUF files: name -> file."""
DOWNLOAD_TIMEOUT_S = 600


class TemplatesUnavailable(RuntimeError):
    """The sdist could not be downloaded or read: the reason, for a skip message."""


def cache_root() -> Path:
    return Path(os.environ.get("STEADYRL_TEST_CACHE") or Path.home() / ".cache" / "steadyrl" / "tests")


def template_dir() -> Path:
    """The folder of the sdist's ``*.jinja`` templates (and the ``VOCABS`` files), downloaded and
    extracted once."""
    from filelock import FileLock

    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"llama-cpp-python-{SDIST_VERSION}-models"
    with FileLock(str(root / f"llama-cpp-python-{SDIST_VERSION}.lock"), timeout=DOWNLOAD_TIMEOUT_S):
        if (target / ".complete").exists():
            return target
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            archive = _download(Path(tmp))
            staged = Path(tmp) / "templates"
            _extract_templates(archive, staged)
            if target.exists():  # a half-written folder from a killed run
                for f in target.iterdir():
                    f.unlink()
                target.rmdir()
            staged.rename(target)
        (target / ".complete").write_text(SDIST_VERSION)
    return target


def _download(into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
           "-q", f"llama-cpp-python=={SDIST_VERSION}", "-d", str(into)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TemplatesUnavailable(f"cannot download llama-cpp-python=={SDIST_VERSION}: {err}") from None
    archives = list(into.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not archives:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TemplatesUnavailable(f"cannot download llama-cpp-python=={SDIST_VERSION} "
                                   f"(pip exited {done.returncode}): {tail[0]}")
    return archives[0]


def _extract_templates(archive: Path, into: Path) -> None:
    into.mkdir()
    with tarfile.open(archive) as tar:
        for member in tar:
            wanted = (TEMPLATES_IN_SDIST in member.name and member.name.endswith(".jinja")
                      or member.name.endswith(tuple(f"/{v}" for v in VOCABS.values())))
            if member.isfile() and wanted:
                data = tar.extractfile(member).read()
                (into / Path(member.name).name).write_bytes(data)
    if not any(into.glob("*.jinja")):
        raise TemplatesUnavailable(f"{archive.name} holds no {TEMPLATES_IN_SDIST}*.jinja")


@dataclass(frozen=True)
class Family:
    """A model family: its template file, eos/bos, the stop tokens of its generation config and any
    other special tokens its tokenizer has (single tokens in ``family_tokenizer``)."""

    name: str
    template: str
    eos: str
    stops: tuple[str, ...]
    bos: str | None = None
    specials: tuple[str, ...] = ()
    kwargs: dict = field(default_factory=dict)


_CHATML = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
           "<tool_response>", "</tool_response>")
_LLAMA3 = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
           "<|eom_id|>", "<|python_tag|>")
_DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
             "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
             "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
             "<｜tool▁output▁end｜>")
_MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]")
_GLM = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>",
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
        "<tool_response>", "</tool_response>")
_KIMI = ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>", "[EOS]")
_HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
            "<|endoftext|>")
_COHERE = ("<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
           "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>",
           "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>", "<|START_THINKING|>", "<|END_THINKING|>")

FAMILIES: tuple[Family, ...] = (
    Family("Qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"),
           specials=_CHATML),
    Family("Qwen3", "Qwen-Qwen3-0.6B.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"), specials=_CHATML),
    Family("Qwen3 (no thinking)", "Qwen-Qwen3-0.6B.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"),
           specials=_CHATML, kwargs={"enable_thinking": False}),
    Family("QwQ", "Qwen-QwQ-32B.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"), specials=_CHATML),
    Family("Qwen3-Coder", "Qwen3-Coder.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"), specials=_CHATML),
    Family("Qwen3.5", "Qwen3.5-4B.jinja", "<|im_end|>", ("<|im_end|>", "<|endoftext|>"), specials=_CHATML),
    Family("Llama-3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|eot_id|>",
           ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), bos="<|begin_of_text|>", specials=_LLAMA3),
    Family("Llama-3.2", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|eot_id|>",
           ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), bos="<|begin_of_text|>", specials=_LLAMA3,
           kwargs={"date_string": "26 Jul 2024"}),
    Family("Llama-3.3", "meta-llama-Llama-3.3-70B-Instruct.jinja", "<|eot_id|>",
           ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), bos="<|begin_of_text|>", specials=_LLAMA3),
    Family("Hermes-3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|im_end|>", ("<|im_end|>",),
           bos="<|begin_of_text|>", specials=_CHATML + _LLAMA3),
    Family("Hermes-2-Pro", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|im_end|>", ("<|im_end|>",),
           bos="<|begin_of_text|>", specials=_CHATML + _LLAMA3),
    Family("Mistral-Nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "</s>", ("</s>",), bos="<s>",
           specials=_MISTRAL),
    Family("Mistral-Small-3.2", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "</s>", ("</s>",), bos="<s>",
           specials=_MISTRAL),
    Family("Devstral", "unsloth-mistral-Devstral-Small-2507.jinja", "</s>", ("</s>",), bos="<s>", specials=_MISTRAL),
    Family("DeepSeek-R1-Distill-Qwen", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜end▁of▁sentence｜>",
           ("<｜end▁of▁sentence｜>",), bos="<｜begin▁of▁sentence｜>", specials=_DEEPSEEK),
    Family("DeepSeek-R1-Distill-Llama", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜end▁of▁sentence｜>",
           ("<｜end▁of▁sentence｜>",), bos="<｜begin▁of▁sentence｜>", specials=_DEEPSEEK),
    Family("GLM-4.6", "GLM-4.6.jinja", "<|endoftext|>", ("<|endoftext|>", "<|user|>", "<|observation|>"),
           specials=_GLM),
    Family("Kimi-K2", "moonshotai-Kimi-K2.jinja", "<|im_end|>", ("<|im_end|>", "[EOS]"), specials=_KIMI),
    Family("gpt-oss", "openai-gpt-oss-120b.jinja", "<|return|>", ("<|return|>", "<|call|>", "<|endoftext|>"),
           specials=_HARMONY),
    Family("Command-R7B", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<|END_OF_TURN_TOKEN|>",
           ("<|END_OF_TURN_TOKEN|>",), bos="<BOS_TOKEN>", specials=_COHERE),
    Family("Phi-3.5", "microsoft-Phi-3.5-mini-instruct.jinja", "<|endoftext|>",
           ("<|end|>", "<|assistant|>", "<|endoftext|>"),
           specials=("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>")),
    Family("Gemma-2", "google-gemma-2-2b-it.jinja", "<eos>", ("<eos>", "<end_of_turn>"), bos="<bos>",
           specials=("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>")),
)


def family_tokenizer(family: Family, templates: Path):
    """A byte-level ``PreTrainedTokenizerFast`` (any text, ``decode(encode(t)) == t``) whose special
    tokens are the family's, with the family's real chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<unk>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(sorted(byte_chars))}}
    core = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokens = dict.fromkeys([family.eos, *(family.bos or "",), *family.stops, *family.specials])
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens if t])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                        eos_token=family.eos, bos_token=family.bos,
                                        clean_up_tokenization_spaces=False)
    tokenizer.chat_template = (templates / family.template).read_text()
    tokenizer.name_or_path = family.name
    return tokenizer


def real_tokenizer(vocab: str, templates: Path):
    """The real tokenizer of ``VOCABS[vocab]`` (its GGUF read by transformers, which needs the
    ``gguf`` package; converted once and saved in the cache, since converting takes a while)."""
    from filelock import FileLock
    from transformers import AutoTokenizer

    saved = templates.parent / f"tokenizer-{vocab}-{SDIST_VERSION}"
    with FileLock(str(templates.parent / f"tokenizer-{vocab}.lock"), timeout=DOWNLOAD_TIMEOUT_S):
        if not (saved / ".complete").exists():
            try:
                import gguf  # noqa: F401
            except ImportError:
                raise TemplatesUnavailable("reading a GGUF vocabulary needs the gguf package") from None
            tok = AutoTokenizer.from_pretrained(str(templates), gguf_file=VOCABS[vocab])
            tok.save_pretrained(saved)
            (saved / ".complete").write_text(SDIST_VERSION)
    return AutoTokenizer.from_pretrained(saved)
