"""Vision-language models through steadyrl.models: loaded from a local directory as
AutoModelForImageTextToText, the vision side frozen, LoRA on the language model only, the fused
log-prob pieces, and no critic on one."""

import io

import pytest
import torch
from PIL import Image

from steadyrl.config.schema import LoraConfig
from steadyrl.data.images import ImageOptions
from steadyrl.data.prompts import PromptFormat, prepare_prompts
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.errors import ConfigError, ModelLoadError
from steadyrl.models import (
    ValueModel,
    apply_lora,
    freeze_vision,
    language_lora_targets,
    lm_backbone_and_head,
    load_policy,
    vision_modules,
)
from steadyrl.vlm import load_processor

ALPHABET = "abcdefghijklmnopqrstuvwxyz ?"
BUILDERS = {"qwen2_vl": build_tiny_qwen2_vl, "llava": build_tiny_llava}
VISION_NAMES = {"qwen2_vl": ["model.visual"], "llava": ["model.vision_tower", "model.multi_modal_projector"]}
CPU = torch.device("cpu")


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def saved(request, tmp_path_factory):
    """``(family, directory)``: a tiny VLM and its processor saved with save_pretrained."""
    tok = build_vision_tokenizer(ALPHABET, request.param)
    model, processor = BUILDERS[request.param](tok)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return request.param, str(path)


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (28, 28), (20, 200, 20)).save(buf, format="PNG")
    return buf.getvalue()


def batch(family, path, model):
    processor = load_processor(path, local_files_only=True)
    form = PromptFormat(99, chat_template=None, processor=processor, images=ImageOptions(column="images"))
    (item,), _ = prepare_prompts([{"prompt": "ab", "images": [png()]}], processor.tokenizer, form, source="s")
    ids = torch.tensor([item.ids])
    extra = {"mm_token_type_ids": (ids == model.config.image_token_id).long()} if family == "qwen2_vl" else {}
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), **item.image_inputs, **extra}


def test_load_policy_loads_a_saved_vlm_and_its_processor(saved):
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    assert type(model).__name__ == {"qwen2_vl": "Qwen2VLForConditionalGeneration",
                                    "llava": "LlavaForConditionalGeneration"}[family]
    with torch.no_grad():
        logits = model(**batch(family, path, model)).logits
    assert torch.isfinite(logits).all()


def test_a_vlm_loads_in_bfloat16_and_reads_float32_pixels(saved):
    """The precision plan applies to the whole model: every weight in the stored dtype, and the
    processor's float32 pixel values are cast by the model, not refused."""
    family, path = saved
    model = load_policy(path, dtype=torch.bfloat16, device=CPU)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    inputs = batch(family, path, model)
    assert inputs["pixel_values"].dtype == torch.float32
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).logits.float()).all()


def test_freeze_vision_freezes_the_tower_and_projector_of_each_family(saved):
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    assert freeze_vision(model) == VISION_NAMES[family]
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in model.named_parameters() if n.startswith(tuple(VISION_NAMES[family]))}
    assert any(p.requires_grad for n, p in model.named_parameters() if "language_model" in n)


def test_an_unknown_family_falls_back_to_the_modules_built_from_its_vision_config(saved, monkeypatch):
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    monkeypatch.setattr("steadyrl.models.VISION_PARTS", ())
    found = list(vision_modules(model))
    assert found and all(n.startswith(tuple(VISION_NAMES[family])) for n in found)


def test_a_text_model_has_nothing_to_freeze(tmp_path):
    from tests.support import build_tiny_lm

    build_tiny_lm(tmp_path)
    assert freeze_vision(load_policy(str(tmp_path), dtype=torch.float32, device=CPU)) == []


def test_lora_on_a_vlm_adapts_only_the_language_models_linear_layers(saved):
    pytest.importorskip("peft")
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    targets = language_lora_targets(model, "all-linear")
    assert targets and all("language_model" in t for t in targets)
    peft_model = apply_lora(model, LoraConfig(enabled=True, r=2))
    adapted = {n.rsplit(".lora_A", 1)[0] for n, _ in peft_model.named_parameters() if ".lora_A" in n}
    assert adapted and all("language_model" in n for n in adapted)
    assert not any(v in n for n in adapted for v in ("visual", "vision_tower", "multi_modal_projector"))


def test_lora_names_on_a_vlm_skip_the_vision_towers_layers_of_the_same_name(saved):
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    targets = language_lora_targets(model, ["q_proj", "v_proj"])
    assert targets and all(t.endswith(("q_proj", "v_proj")) and "language_model" in t for t in targets)
    with pytest.raises(ModelLoadError, match="names no linear layer"):
        language_lora_targets(model, ["nothing_here"])


def test_the_fused_log_prob_pieces_of_a_vlm_reproduce_its_logits(saved):
    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    backbone, head = lm_backbone_and_head(model)
    inputs = batch(family, path, model)
    with torch.no_grad():
        hidden = backbone(**inputs, use_cache=False).last_hidden_state
        torch.testing.assert_close(head(hidden), model(**inputs).logits)


def test_a_critic_on_a_vlm_is_refused_naming_the_reason(saved):
    _, path = saved
    with pytest.raises(ConfigError, match="vision-language model.*text-only hidden states"):
        ValueModel.from_pretrained(path, dtype=torch.float32, device=CPU)


def test_the_autocast_plan_covers_the_whole_vlm_with_float32_weights(saved):
    """model.dtype auto on a GPU: float32 weights computed in bfloat16 — the vision tower's matmuls
    too (it sits under the backbone the hooks wrap), whether the full model or the fused path's
    backbone is called."""
    from steadyrl.precision import PrecisionPlan, use_autocast

    family, path = saved
    model = load_policy(path, dtype=torch.float32, device=CPU)
    use_autocast(model, PrecisionPlan(stored="float32", computed="bfloat16", update="adamw", sampled="bfloat16"), "cpu")
    vision_linears = [m for name in VISION_NAMES[family] for m in model.get_submodule(name).modules()
                      if isinstance(m, torch.nn.Linear)]
    seen = []
    for linear in vision_linears:
        linear.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    backbone, _ = lm_backbone_and_head(model)
    inputs = batch(family, path, model)
    with torch.no_grad():
        backbone(**inputs, use_cache=False)
        assert seen and set(seen) == {torch.bfloat16}
        seen.clear()
        assert torch.isfinite(model(**inputs).logits.float()).all()
    assert seen and set(seen) == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
