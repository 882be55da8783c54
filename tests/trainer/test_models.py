"""Models and tokenizers load from local directories written by ``save_pretrained``, and the
fused log-prob path agrees with the logits path on a real model."""

import pytest
import torch

from steadyrl.errors import ModelLoadError
from steadyrl.models import ValueModel, lm_backbone_and_head, load_policy, load_tokenizer
from steadyrl.trainer.batch import TrainBatch
from steadyrl.trainer.forward import response_logprobs

CPU = torch.device("cpu")


def test_policy_and_tokenizer_load_from_a_save_pretrained_directory(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(str(tiny_model_dir))
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    policy = load_policy(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([tokenizer("abc=")["input_ids"]])
    torch.testing.assert_close(policy(ids).logits, reference(ids).logits)
    policy.save_pretrained(tmp_path / "again")
    tokenizer.save_pretrained(tmp_path / "again")
    again = load_policy(str(tmp_path / "again"), dtype=torch.float32, device=CPU)
    torch.testing.assert_close(again(ids).logits, policy(ids).logits)


def test_missing_local_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_policy(str(tmp_path / "nope" / "model"), dtype=torch.float32, device=CPU)


def _batch(tokenizer) -> TrainBatch:
    prompts = [tokenizer("abc=")["input_ids"], tokenizer("hgfed=")["input_ids"]]
    padded = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    response = torch.tensor([[5, 6, 7, tokenizer.eos_token_id], [8, 9, tokenizer.eos_token_id, 0]])
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    attention = torch.cat([padded["attention_mask"], response_mask], 1)
    return TrainBatch(input_ids=torch.cat([padded["input_ids"], response], 1), attention_mask=attention,
                      position_ids=(attention.cumsum(-1) - 1).clamp(min=0), response_ids=response,
                      response_mask=response_mask)


def test_fused_and_naive_log_probs_agree_on_the_model(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    policy = load_policy(str(tiny_model_dir), dtype=torch.float64, device=CPU)
    assert lm_backbone_and_head(policy) is not None
    batch = _batch(tokenizer)
    fused = response_logprobs(policy, batch, temperature=0.7, impl="fused", chunk_size=3, with_entropy=True)
    naive = response_logprobs(policy, batch, temperature=0.7, impl="naive", with_entropy=True)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(fused[0][mask], naive[0][mask])
    torch.testing.assert_close(fused[1][mask], naive[1][mask])
    # and both equal a hand-computed log-softmax of the full forward pass
    logits = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids).logits[:, batch.prompt_len - 1 : -1] / 0.7
    manual = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(fused[0][mask], manual[mask])


def test_critic_saves_and_loads_its_value_head(tiny_model_dir, tmp_path):
    critic = ValueModel.from_pretrained(str(tiny_model_dir), dtype=torch.float32, device=CPU)
    torch.nn.init.normal_(critic.value_head.weight)
    critic.save_pretrained(tmp_path / "critic")
    again = ValueModel.from_pretrained(str(tmp_path / "critic"), dtype=torch.float32, device=CPU)
    ids = torch.tensor([[1, 4, 5, 6]])
    mask = torch.ones_like(ids)
    torch.testing.assert_close(again(ids, mask), critic(ids, mask))
