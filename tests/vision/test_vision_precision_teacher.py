"""A vision-language policy under the precision rule and beside a teacher.

* After 2 updates at lr 1e-6 of a batch with images, the GPU default precision (float32 weights
  under bfloat16 autocast, emulated on the CPU) moves the trained weights as float32 does, and
  pure bfloat16 with ``model.bf16_update: kahan`` does too (DESIGN.md: a test for any new model
  path); the frozen vision tower does not move.
* A text-only teacher beside a vision-language policy is refused by name: it would read image
  tokens without the images.
"""

import pytest
import torch
from support_precision import LR, config, moved_fraction
from support_vision_train import image_prompt, square, text_prompt

from steadyrl.assembly.setup import build_models, build_optimizer
from steadyrl.demo.vision_model import build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.precision import precision_plan
from steadyrl.rollout import Generation
from steadyrl.trainer.batch import batch_from_generation
from steadyrl.trainer.optim import trained_value
from steadyrl.trainer.update import ppo_update

CPU = torch.device("cpu")
ALPHABET = "abcdefghij "


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    """A tiny Qwen2-VL, every matrix ~N(0, 0.02) as a pretrained model's, saved with its processor."""
    directory = tmp_path_factory.mktemp("vlm")
    tok = build_vision_tokenizer(ALPHABET)
    model, processor = build_tiny_qwen2_vl(tok, hidden_size=64, n_heads=4)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def _batch(processor, tok, seed: int):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(4):
        color = tuple(int(c) for c in torch.randint(0, 256, (3,), generator=g))
        ids, inputs = image_prompt(processor, [square(color)], "abc") if i < 3 else (text_prompt(tok, "abc"), None)
        rows.append((ids, inputs, "ab"[i % 2] + "cde"))
    pad = tok.pad_token_id
    responses = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for _, _, t in rows]
    p, r = max(len(x[0]) for x in rows), max(len(x) for x in responses)
    prompt_ids, prompt_mask = torch.full((4, p), pad), torch.zeros((4, p), dtype=torch.long)
    response_ids, response_mask = torch.full((4, r), pad), torch.zeros((4, r), dtype=torch.long)
    for i, ((ids, _, _), resp) in enumerate(zip(rows, responses)):
        prompt_ids[i, p - len(ids):], prompt_mask[i, p - len(ids):] = torch.tensor(ids), 1
        response_ids[i, : len(resp)], response_mask[i, : len(resp)] = torch.tensor(resp), 1
    gen = Generation(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                     response_mask=response_mask, truncated=torch.zeros(4, dtype=torch.bool),
                     completions=[t for *_, t in rows], image_inputs=[x[1] for x in rows])
    batch = batch_from_generation(gen)
    batch.loss_mask = response_mask
    batch.advantages = torch.randn(response_mask.shape, generator=g)
    return batch


def _moved(vlm_dir, dtype: str, update: str, device_type: str, optimizer_update: str | None = None):
    """Fractions of the trained and of the frozen (vision) weights moved by 2 updates at lr 1e-6."""
    from steadyrl.vlm import load_processor

    cfg = config(dtype, update)
    processor = load_processor(str(vlm_dir))
    torch.manual_seed(0)
    policy, _, _, _ = build_models(cfg, str(vlm_dir), CPU, precision_plan(dtype, update, device_type))
    opt = build_optimizer(policy.parameters(), cfg.optim, LR, optimizer_update or update)  # plain: refused by the config
    trained = [p for p in policy.parameters() if p.requires_grad]
    frozen = list(policy.model.visual.parameters())
    before = [trained_value(p, opt).clone() for p in trained]
    frozen_before = [p.detach().clone() for p in frozen]
    for step in range(2):
        ppo_update(policy, opt, _batch(processor, processor.tokenizer, step), cfg, kl_coef=0.0, device=CPU)
    return (moved_fraction(before, [trained_value(p, opt) for p in trained]),
            moved_fraction(frozen_before, [p.detach() for p in frozen]))


def test_the_gpu_default_precision_moves_a_vlms_weights_as_float32_does(vlm_dir):
    fp32, fp32_frozen = _moved(vlm_dir, "float32", "kahan", "cpu")
    gpu_default, frozen = _moved(vlm_dir, "auto", "kahan", "cuda")  # float32 weights, bf16 autocast
    bf16_kahan, _ = _moved(vlm_dir, "bfloat16", "kahan", "cuda")
    bf16_plain, _ = _moved(vlm_dir, "bfloat16", "kahan", "cuda", optimizer_update="plain")
    assert fp32 > 0.9 and gpu_default > 0.9 and bf16_kahan > 0.9
    assert abs(gpu_default - fp32) < 0.05 and abs(bf16_kahan - fp32) < 0.05
    assert bf16_plain < 0.5 * fp32  # what the precision rule is for: plain bf16 loses the updates
    assert fp32_frozen == 0.0 and frozen == 0.0  # model.freeze_vision (the default)


def test_a_text_teacher_beside_a_vision_policy_is_refused_by_name(vlm_dir, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from steadyrl.assembly.teacher import load_teacher
    from steadyrl.config import load_config
    from steadyrl.errors import ConfigError
    from steadyrl.vlm import load_processor

    tok = load_processor(str(vlm_dir)).tokenizer
    text = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2))
    text.save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    cfg = load_config(None, ["trainer.device=cpu", f"teacher.name_or_path={tmp_path / 'teacher'}"])
    with pytest.raises(ConfigError, match=r"teacher.name_or_path = .* is a text model, but the policy is a vision"):
        load_teacher(cfg, CPU, vision_policy=True)
    assert load_teacher(cfg, CPU, vision_policy=False) is not None  # a text policy: the same teacher is fine
    vision_teacher = load_config(None, ["trainer.device=cpu", f"teacher.name_or_path={vlm_dir}"])
    assert load_teacher(vision_teacher, CPU, vision_policy=True) is not None
