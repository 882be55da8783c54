"""OpenAI ``image_url`` parts through the gateway: hostile ones are a 400 naming the field, a text
policy refuses images with a 400, and a vision-language policy's processor expands them into
image tokens the trained row holds as observation tokens, with the images' inputs."""

from __future__ import annotations

import base64
import io
import json
import sys
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from steadyrl.agents.images import ImageContentError, decode_data_url, load_image
from steadyrl.agents.parsers import load_parser
from steadyrl.demo.vision_model import build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.gateway import GatewayAgent
from steadyrl.gateway.protocol import RequestError, parse_request
from steadyrl.rollout.base import Generation, response_mask_from_ids
from steadyrl.rollout.episode_images import processed
from steadyrl.rollout.episodes import TurnLimits


def data_url(rgb=(255, 0, 0), size=28) -> str:
    out = io.BytesIO()
    Image.new("RGB", (size, size), rgb).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def chat(url) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "what colour?"},
                                                      {"type": "image_url", "image_url": {"url": url}}]}]}


@pytest.mark.parametrize("url, message", [
    ("data:image/png;base64," + "A" * (10 * 2**20), "larger than"),
    ("data:image/png;base64,@@not base64@@", "not valid base64"),
    ("data:image/png;base64," + base64.b64encode(b"GIF89a but not really").decode(), "not a readable image"),
    ("http://example.com/cat.png", "not fetched"),
    ("https://example.com/cat.png", "not fetched"),
    ("file:///etc/passwd", "expected a data:image"),
    (12, "must be a string"),
])
def test_hostile_image_urls_are_a_400_naming_the_field(url, message):
    with pytest.raises(RequestError) as err:
        parse_request(chat(url), chat=True)
    assert err.value.status == 400 and err.value.param == "messages"
    assert "messages[0].content[1].image_url.url" in str(err.value) and message in str(err.value)


def test_a_good_image_url_is_decoded_and_its_part_becomes_a_placeholder():
    req = parse_request(chat(data_url((0, 255, 0))), chat=True)
    assert req.messages[0]["content"] == [{"type": "text", "text": "what colour?"}, {"type": "image"}]
    assert len(req.images) == 1 and req.images[0].getpixel((3, 3)) == (0, 255, 0)
    text_only = parse_request({"messages": [{"role": "user", "content": "hi"}]}, chat=True)
    assert text_only.images == [] and text_only.messages[0]["content"] == "hi"


@pytest.fixture(scope="module")
def vlm():
    tok = build_vision_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789 .,:!?\n", "qwen2_vl")
    model, processor = build_tiny_qwen2_vl(tok)
    return SimpleNamespace(tok=tok, processor=processor, image_token=model.config.image_token_id)


class RecordingEngine:
    """Answers every prompt with "ok" and the end token; records each call's image inputs."""

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids, self.calls = tokenizer, [tokenizer.eos_token_id], []

    def generate(self, prompt_ids, n, *, max_new_tokens, image_inputs=None, images=None, **sampling):
        self.calls.append(SimpleNamespace(image_inputs=image_inputs, images=images))
        contexts = [p for p in prompt_ids for _ in range(n)]
        row = self.tokenizer("ok", add_special_tokens=False)["input_ids"] + self.eos_ids
        response = torch.tensor([row for _ in contexts])
        mask, truncated = response_mask_from_ids(response, self.eos_ids, max_new_tokens)
        p, pad = max(len(c) for c in contexts), self.tokenizer.pad_token_id
        return Generation(prompt_ids=torch.tensor([[pad] * (p - len(c)) + c for c in contexts]),
                          prompt_mask=torch.tensor([[0] * (p - len(c)) + [1] * len(c) for c in contexts]),
                          response_ids=response, response_mask=mask, truncated=truncated,
                          completions=["ok"] * len(contexts))


AGENT = '''
import json, urllib.error, urllib.request
ANSWERS = []
FIRST, SECOND = {first!r}, {second!r}

def post(base_url, api_key, body):
    request = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={{"Authorization": "Bearer " + api_key, "Content-Type": "application/json"}})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return 200, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())

def run_episode(row, base_url, api_key):
    messages = [{{"role": "user", "content": [{{"type": "text", "text": "what colour?"}},
                                              {{"type": "image_url", "image_url": {{"url": FIRST}}}}]}}]
    status, first = post(base_url, api_key, {{"messages": messages, "max_tokens": 8, "return_token_ids": True}})
    ANSWERS.append((status, first))
    if status != 200:
        return 0.0
    messages += [first["choices"][0]["message"], {{"role": "user", "content": [
        {{"type": "text", "text": "and now?"}}, {{"type": "image_url", "image_url": {{"url": SECOND}}}}]}}]
    ANSWERS.append(post(base_url, api_key, {{"messages": messages, "max_tokens": 8, "return_token_ids": True}}))
    return 1.0
'''


def run(tmp_path, tok, processor, engine):
    path = tmp_path / "picture_agent.py"
    path.write_text(AGENT.format(first=data_url((255, 0, 0)), second=data_url((0, 0, 255))))
    spec = f"{path}:run_episode"
    agent = GatewayAgent(spec, parser=load_parser("hermes"), concurrency=4, timeout_s=60, wave_wait_s=0.05,
                         processor=processor)
    messages = [{"role": "user", "content": "what colour?"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompts = [SimpleNamespace(ids=tok(text, add_special_tokens=False)["input_ids"], columns={}, text=text,
                               messages=messages, conversation=messages)]
    limits = TurnLimits(max_turns=4, max_new_tokens=8, max_observation_tokens=64, observation_truncation="right",
                        episode_tokens=200)
    try:
        gen = agent.rollout(engine, tok, prompts, 1, limits, temperature=1.0, top_p=1.0, top_k=0)
    finally:
        agent.shutdown()
    module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path))
    return gen, module.ANSWERS


def test_a_text_policy_refuses_an_image_with_a_400(tmp_path, vlm):
    engine = RecordingEngine(vlm.tok)
    gen, answers = run(tmp_path, vlm.tok, None, engine)
    status, body = answers[0]
    assert status == 400 and "text model" in body["error"]["message"] and body["error"]["param"] == "messages"
    assert engine.calls == [] and gen.episodes[0].failed  # no call reached the engine


def test_a_vision_policy_trains_the_row_with_its_images_as_observation_tokens(tmp_path, vlm):
    engine = RecordingEngine(vlm.tok)
    gen, answers = run(tmp_path, vlm.tok, vlm.processor, engine)
    assert [a[0] for a in answers] == [200, 200]
    first, second = answers[0][1], answers[1][1]
    p1, p2 = first["prompt_token_ids"], second["prompt_token_ids"]
    assert p1.count(vlm.image_token) == 1 and p2.count(vlm.image_token) == 2
    sampled = first["choices"][0]["token_ids"]
    assert p2[:len(p1) + len(sampled)] == p1 + sampled  # the second call extends the first
    prompt = gen.prompt_ids[0][gen.prompt_mask[0].bool()].tolist()
    valid = gen.response_mask[0].bool()
    response, policy = gen.response_ids[0][valid].tolist(), gen.policy_mask[0][valid].tolist()
    assert prompt == p1 and prompt + response == p2 + second["choices"][0]["token_ids"]
    at = response.index(vlm.image_token)
    assert policy[at] == 0 and not gen.trained_mask[0][valid][at]
    # the row's image inputs: both images, in order, as the processor makes them
    red, blue = (Image.open(io.BytesIO(base64.b64decode(data_url(c).split(",", 1)[1]))).convert("RGB")
                 for c in ((255, 0, 0), (0, 0, 255)))
    expected = processed(vlm.processor, vlm.processor.image_token * 2, [red, blue])[1]
    assert all(torch.equal(gen.image_inputs[0][k], expected[k]) for k in expected)
    assert [len(c.images[0]) for c in engine.calls] == [1, 2]
    assert engine.calls[1].image_inputs[0]["image_grid_thw"].shape[0] == 2
    json.dumps(second)  # the answers are plain JSON
    assert gen.episodes[0].samples is None  # turn samples carry no images: only the row is trained


def test_a_truncated_image_is_a_400_naming_the_field():
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(out, format="PNG")
    cut = out.getvalue()[:60]  # its header, then nothing
    with pytest.raises(RequestError) as err:
        parse_request(chat("data:image/png;base64," + base64.b64encode(cut).decode()), chat=True)
    assert "messages[0].content[1].image_url.url" in str(err.value)
    assert "corrupt" in str(err.value)


def test_more_images_than_a_request_may_hold_is_a_400():
    from steadyrl.agents.images import MAX_IMAGES_PER_EPISODE

    url = data_url()
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}] * (
        MAX_IMAGES_PER_EPISODE + 1)}]}
    with pytest.raises(RequestError, match=f"more than {MAX_IMAGES_PER_EPISODE} images"):
        parse_request(body, chat=True)



@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(
    lambda b: "data:image/png;base64," + base64.b64encode(b).decode()), st.binary(max_size=300)))
def test_any_image_value_is_read_or_refused_with_a_clear_error_never_a_crash(value):
    read = decode_data_url if isinstance(value, str) else load_image  # a URL, or bytes a tool returned
    try:
        image = read(value, "f")
    except ImageContentError as err:
        assert str(err).startswith("f: ")
    else:
        assert image.mode == "RGB"
