"""Images in multi-turn observations, on both tiny VLM families, with a stand-in engine.

The engine answers each context with the next scripted turn and records the image inputs (and PIL
images) it was given, so the tests check what the HF / vLLM engines would receive each turn: the
prompt's images, then each observation's, in order. The episode's tokens are checked against the
processor's own tokenization of the whole conversation with all its images.
"""

import base64
import io
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from steadyrl.agents.environment import EnvironmentAgent, as_messages
from steadyrl.agents.images import MAX_IMAGES_PER_EPISODE, ImageContentError, decode_data_url, json_content
from steadyrl.agents.parsers import load_parser
from steadyrl.agents.toolagent import ToolAgent
from steadyrl.agents.tools import Tool, run_tool
from steadyrl.demo.vision_model import build_tiny_llava, build_tiny_qwen2_vl, build_vision_tokenizer
from steadyrl.errors import ConfigError
from steadyrl.rollout.base import Generation, response_mask_from_ids
from steadyrl.rollout.driver import TurnDriver
from steadyrl.rollout.episode_images import processed
from steadyrl.rollout.episodes import TurnLimits, _Episode, _template_drift, run_episodes

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:!?\n<>{}\"_/"
HEADER = "<|im_start|>assistant"
LIMITS = TurnLimits(max_turns=3, max_new_tokens=80, max_observation_tokens=200, observation_truncation="right",
                    episode_tokens=400)


@pytest.fixture(scope="module", params=["qwen2_vl", "llava"])
def family(request):
    tok = build_vision_tokenizer(ALPHABET, request.param)
    build = build_tiny_qwen2_vl if request.param == "qwen2_vl" else build_tiny_llava
    model, processor = build(tok)
    image_token = model.config.image_token_id
    ids = processed(processor, processor.image_token, [square((0, 0, 0))])[0]
    return SimpleNamespace(name=request.param, tok=tok, processor=processor, image_token=image_token,
                           per_image=ids.count(image_token))  # a 28 x 28 image: 1 token (Qwen2-VL), 4 (LLaVA)


def square(rgb) -> Image.Image:
    return Image.new("RGB", (28, 28), rgb)


class RecordingEngine:
    """Answers a context holding k assistant turns with ``script[k]`` + end token; records the
    ``image_inputs`` and ``images`` of every call."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.eos_ids = [tokenizer.eos_token_id]
        self.calls = []

    def generate(self, prompt_ids, n, *, max_new_tokens, image_inputs=None, images=None, **sampling):
        self.calls.append(SimpleNamespace(rows=len(prompt_ids), n=n, image_inputs=image_inputs, images=images))
        contexts = [p for p in prompt_ids for _ in range(n)]
        rows = []
        for ids in contexts:
            k = self.tokenizer.decode(ids).count(HEADER) - 1
            text = self.script[min(k, len(self.script) - 1)]
            rows.append((self.tokenizer(text, add_special_tokens=False)["input_ids"] + self.eos_ids)[:max_new_tokens])
        width, pad = max(len(r) for r in rows), self.tokenizer.pad_token_id
        response = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask, truncated = response_mask_from_ids(response, self.eos_ids, max_new_tokens)
        p = max(len(c) for c in contexts)
        return Generation(prompt_ids=torch.tensor([[pad] * (p - len(c)) + c for c in contexts]),
                          prompt_mask=torch.tensor([[0] * (p - len(c)) + [1] * len(c) for c in contexts]),
                          response_ids=response, response_mask=mask, truncated=truncated,
                          completions=self.tokenizer.batch_decode(rows, skip_special_tokens=True))


def prompt(fam, with_image=True):
    content = [{"type": "text", "text": "what colour?"}] + ([{"type": "image"}] if with_image else [])
    messages = [{"role": "user", "content": content}]
    text = fam.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    images = (square((255, 0, 0)),) if with_image else ()
    ids, inputs = processed(fam.processor, text, list(images))
    return SimpleNamespace(ids=ids, columns={}, text=text, messages=messages, conversation=messages,
                           images=images, image_inputs=inputs)


class PictureEnv:
    """Each step shows a picture: a bare PIL image first, then a message with an ``image`` part."""

    def reset(self, **row):
        return None

    def step(self, text):
        if text.strip() == "look":
            return square((0, 255, 0)), 0.0, False
        if text.strip() == "again":
            return {"role": "user", "content": [{"type": "text", "text": "see"},
                                                {"type": "image", "image": square((0, 0, 255))}]}, 0.0, False
        return None, 1.0, True


def picture_agent(cls=PictureEnv, isolation="inline"):
    return EnvironmentAgent(cls, observation_role="user", timeout_s=10, isolation=isolation)


def test_observation_images_are_observation_tokens_and_grow_the_inputs_in_order(family):
    engine = RecordingEngine(family.tok, ["look", "again", "done"])
    gen = run_episodes(engine, family.tok, [prompt(family)], 2, agent=picture_agent(), limits=LIMITS,
                       processor=family.processor)
    per = family.per_image
    for row in range(2):
        ids, policy = gen.response_ids[row], gen.policy_mask[row]
        image_at = (ids == family.image_token) & gen.response_mask[row].bool()
        assert int(image_at.sum()) == 2 * per  # two observation images, expanded
        assert not policy[image_at].any() and not gen.trained_mask[row][image_at].any()
        info = gen.episodes[row]
        assert info.turns == 3 and not info.failed and info.drift_tokens == 0
        assert info.observation_tokens >= 2 * per
    # the episode's image inputs: the prompt's image, then the two observations', in order
    inputs = gen.image_inputs[0]
    reference = processed(family.processor, "x" + "".join([family.processor.image_token] * 3),
                          [square((255, 0, 0)), square((0, 255, 0)), square((0, 0, 255))])[1]
    assert sorted(inputs) == sorted(reference)
    for key in inputs:
        assert torch.equal(inputs[key], reference[key])
    # each turn's engine call got every running episode's images so far
    counts = [[len(imgs) for imgs in call.images] for call in engine.calls]
    assert counts == [[1], [2, 2], [3, 3]]
    assert [c.image_inputs[-1]["pixel_values"].shape[0] for c in engine.calls[1:]] == [
        2 * inputs["pixel_values"].shape[0] // 3, inputs["pixel_values"].shape[0]]


def test_the_episode_is_the_processors_tokenization_of_the_whole_conversation(family):
    engine = RecordingEngine(family.tok, ["look", "done"])
    gen = run_episodes(engine, family.tok, [prompt(family)], 1, agent=picture_agent(), limits=LIMITS,
                       processor=family.processor)
    info = gen.episodes[0]
    conversation = prompt(family).conversation + info.messages  # look, the picture, done
    text = family.processor.apply_chat_template(conversation, tokenize=False)
    expected = processed(family.processor, text, [square((255, 0, 0)), square((0, 255, 0))])[0]
    got = gen.prompt_ids[0][gen.prompt_mask[0].bool()].tolist() + gen.response_ids[0][
        gen.response_mask[0].bool()].tolist()
    assert got == expected[:len(got)] and len(expected) - len(got) == 1  # the template's "\n" after the last end


def test_the_drift_check_counts_a_changed_token_of_an_episode_with_images(family):
    history = [{"role": "user", "content": [{"type": "image"}]}, {"role": "assistant", "content": "look"},
               {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image"}]}]
    images = [square((255, 0, 0)), square((0, 255, 0))]
    text = family.processor.apply_chat_template(history + [{"role": "assistant", "content": "ok"}], tokenize=False)
    ids = processed(family.processor, text, images)[0]
    head = processed(family.processor, family.processor.apply_chat_template(history[:1], tokenize=False,
                                                                          add_generation_prompt=True), images[:1])[0]
    e = _Episode(prompt_ids=head, history=history, row={}, ids=ids[len(head):-1], text="ok",
                 end="<|im_end|>", images=images)
    agent = SimpleNamespace(tool_schemas=None, template_kwargs={})
    e.ids = e.ids + [family.tok.eos_token_id]
    assert _template_drift(family.tok, e, agent, family.processor) == 0
    at = e.ids.index(family.image_token, 0)
    e.ids[at] = family.tok.convert_tokens_to_ids("x")
    assert _template_drift(family.tok, e, agent, family.processor) == 1


def test_a_text_model_given_an_image_observation_is_an_error_naming_the_environment(family):
    engine = RecordingEngine(family.tok, ["look", "done"])
    with pytest.raises(ConfigError, match=r"environment 'PictureEnv'.*text model"):
        run_episodes(engine, family.tok, [prompt(family, with_image=False)], 1, agent=picture_agent(),
                     limits=LIMITS)


def snapshot() -> object:
    """Take a picture."""
    return ["here", square((9, 9, 9))]


def test_a_tool_that_returns_an_image_is_an_observation_image(family):
    from transformers.utils import get_json_schema

    agent = ToolAgent([Tool(name="snapshot", fn=snapshot, schema=get_json_schema(snapshot))], load_parser("hermes"),
                      timeout_s=10, isolation="inline")
    agent.structured_calls = False  # the tiny template shows content only
    call = '<tool_call>{"name": "snapshot", "arguments": {}}</tool_call>'
    engine = RecordingEngine(family.tok, [call, "done"])
    gen = run_episodes(engine, family.tok, [prompt(family, with_image=False)], 1, agent=agent, limits=LIMITS,
                       processor=family.processor)
    info = gen.episodes[0]
    assert info.tool_calls == 1 and not info.failed and info.drift_tokens == 0
    assert info.messages[1]["role"] == "tool" and info.messages[1]["content"][1] == {"type": "image"}
    assert int((gen.response_ids[0] == family.image_token).sum()) == family.per_image
    assert engine.calls[0].image_inputs is None and len(engine.calls[1].images[0]) == 1
    # without a processor: the error names the tool
    with pytest.raises(ConfigError, match=r"tool 'snapshot'.*text model"):
        run_episodes(RecordingEngine(family.tok, [call, "done"]), family.tok, [prompt(family, with_image=False)], 1,
                     agent=agent, limits=LIMITS)


class HostileEnv:
    """Sends the image named by its row's ``kind``."""

    def reset(self, kind, **row):
        self.kind = kind

    def step(self, text):
        url = {"corrupt": "data:image/png;base64,!!!!", "http": "http://example.com/cat.png",
               "huge": "data:image/png;base64," + "A" * (10 * 2**20), "not_image": "data:image/png;base64,"
               + base64.b64encode(b"hello, no picture").decode()}[self.kind]
        return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}, 0.0, False


@pytest.mark.parametrize("kind, message", [("corrupt", "not valid base64"), ("http", "not fetched"),
                                           ("huge", "larger than"), ("not_image", "not a readable image")])
def test_a_hostile_image_fails_its_episode_naming_the_field(family, kind, message):
    p = prompt(family, with_image=False)
    p.columns = {"kind": kind}
    engine = RecordingEngine(family.tok, ["look", "done"])
    gen = run_episodes(engine, family.tok, [p], 1, agent=picture_agent(HostileEnv), limits=LIMITS,
                       processor=family.processor)
    info = gen.episodes[0]
    assert info.failed and message in info.error and "content[0].image_url.url" in info.error
    assert gen.image_inputs is None or gen.image_inputs == [None]


class ManyPicturesEnv:
    def reset(self, **row):
        return None

    def step(self, text):
        return [square((i, 0, 0)) for i in range(MAX_IMAGES_PER_EPISODE + 1)], 0.0, False


def test_images_per_episode_are_capped(family):
    gen = run_episodes(RecordingEngine(family.tok, ["look", "done"]), family.tok, [prompt(family)], 1,
                       agent=picture_agent(ManyPicturesEnv), limits=LIMITS, processor=family.processor)
    assert gen.episodes[0].failed and f"more than {MAX_IMAGES_PER_EPISODE - 1} images" in gen.episodes[0].error


def test_an_image_counts_against_max_observation_tokens_and_is_never_cut(family):
    per = family.per_image
    probe = run_episodes(RecordingEngine(family.tok, ["again", "done"]), family.tok, [prompt(family)], 1,
                         agent=picture_agent(), limits=LIMITS, processor=family.processor)
    size = probe.episodes[0].observation_tokens  # "see" + the image, wrapped
    tight = TurnLimits(**{**LIMITS.__dict__, "max_observation_tokens": size - 2})  # the text is cut to fit
    gen = run_episodes(RecordingEngine(family.tok, ["again", "done"]), family.tok, [prompt(family)], 1,
                       agent=picture_agent(), limits=tight, processor=family.processor)
    info = gen.episodes[0]
    assert info.observation_tokens == size - 2 and info.messages[1]["content"][0]["text"] == "s"
    assert int((gen.response_ids[0] == family.image_token).sum()) == per
    none = TurnLimits(**{**LIMITS.__dict__, "max_observation_tokens": size - 4})  # not even the image fits
    gen = run_episodes(RecordingEngine(family.tok, ["again", "done"]), family.tok, [prompt(family)], 1,
                       agent=picture_agent(), limits=none, processor=family.processor)
    assert gen.episodes[0].truncation == "max_observation_tokens" and gen.image_inputs[0]["pixel_values"].shape[0] \
        == probe.image_inputs[0]["pixel_values"].shape[0] // 2


def test_stepwise_mode_is_refused_for_a_vision_language_policy(family):
    agent = picture_agent()
    agent.multi_turn_mode = "stepwise"
    with pytest.raises(ConfigError, match="rollout.multi_turn.mode"):
        TurnDriver(agent, family.processor)
    TurnDriver(agent)  # a text policy keeps it


def test_images_from_a_sandboxed_environment_come_back_as_data_urls():
    messages = as_messages(square((1, 2, 3)), "user")
    url = messages[0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert decode_data_url(url, "f").getpixel((0, 0)) == (1, 2, 3)
    assert as_messages("text", "user") == [{"role": "user", "content": "text"}]
    assert json_content({"a": 1}) == {"a": 1} and run_tool(Tool("s", snapshot, {"function": {}}), {})[0] == {
        "type": "text", "text": "here"}


def test_a_decompression_bomb_is_refused_from_its_header():
    out = io.BytesIO()
    Image.new("1", (8000, 8000)).save(out, format="PNG")  # a few kB, 64 M pixels
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    with pytest.raises(ImageContentError, match=r"8000 x 8000 = 64000000 pixels"):
        decode_data_url(url, "messages[0].content[0].image_url.url")


def test_images_survive_the_sandbox_of_a_tool_and_of_an_environment(family):
    """Under process isolation a worker replies in JSON: the images come back as data URLs."""
    from transformers.utils import get_json_schema

    tool = ToolAgent([Tool(name="snapshot", fn=snapshot, schema=get_json_schema(snapshot))], load_parser("hermes"),
                     timeout_s=30, isolation="process")
    tool.structured_calls = False
    env = picture_agent(isolation="process")
    call = '<tool_call>{"name": "snapshot", "arguments": {}}</tool_call>'
    try:
        for agent, script in ((tool, [call, "done"]), (env, ["look", "done"])):
            gen = run_episodes(RecordingEngine(family.tok, script), family.tok, [prompt(family, with_image=False)], 1,
                               agent=agent, limits=LIMITS, processor=family.processor)
            assert not gen.episodes[0].failed, gen.episodes[0].error
            assert int((gen.response_ids[0] == family.image_token).sum()) == family.per_image
            assert gen.image_inputs[0] is not None
    finally:
        tool.shutdown()
        env.shutdown()


def test_as_sampled_mode_appends_image_observations_too(family):
    agent = picture_agent()
    agent.multi_turn_mode = "as_sampled"
    engine = RecordingEngine(family.tok, ["look", "again", "done"])
    gen = run_episodes(engine, family.tok, [prompt(family)], 1, agent=agent, limits=LIMITS,
                       processor=family.processor)
    assert int((gen.response_ids[0] == family.image_token).sum()) == 2 * family.per_image
    assert [len(c.images[0]) for c in engine.calls] == [1, 2, 3] and gen.episodes[0].drift_tokens == 0


def test_a_template_kept_on_the_processor_only_renders_the_episode():
    """LLaVA checkpoints keep their chat template on the processor, not the tokenizer."""
    tok = build_vision_tokenizer(ALPHABET, "llava")
    model, processor = build_tiny_llava(tok)
    tok.chat_template = None
    assert processor.chat_template
    fam = SimpleNamespace(name="llava", tok=tok, processor=processor, image_token=model.config.image_token_id)
    engine = RecordingEngine(tok, ["look", "done"])
    gen = run_episodes(engine, tok, [prompt(fam)], 1, agent=picture_agent(), limits=LIMITS, processor=processor)
    info = gen.episodes[0]
    assert not info.failed and info.drift_tokens == 0 and len(engine.calls[1].images[0]) == 2


class OpeningEnv:
    """Its first observation replaces the row's prompt: a picture, or (``text``) words only."""

    def reset(self, text=False, **row):
        return "describe nothing" if text else ["describe:", square((7, 7, 7))]

    def step(self, text):
        return None, 1.0, True


@pytest.mark.parametrize("text", [False, True])
def test_an_environments_first_observation_replaces_the_prompts_images(family, text):
    p = prompt(family)
    p.columns = {"text": text}
    engine = RecordingEngine(family.tok, ["ok"])
    gen = run_episodes(engine, family.tok, [p], 1, agent=picture_agent(OpeningEnv), limits=LIMITS,
                       processor=family.processor)
    context = gen.prompt_ids[0][gen.prompt_mask[0].bool()].tolist()
    if text:  # the prompt's image went with the prompt
        assert family.image_token not in context and gen.image_inputs is None and engine.calls[0].images is None
    else:
        assert context.count(family.image_token) == family.per_image and len(engine.calls[0].images[0]) == 1
        assert engine.calls[0].images[0][0].getpixel((0, 0)) == (7, 7, 7)


def test_an_openenv_observations_image_field_is_shown_after_its_text():
    from steadyrl.envs.openenv import observation_content

    url = json_content(square((5, 6, 7)))[0]["image_url"]["url"]
    content = observation_content({"board": "x.o", "frame": url, "done": False}, None, "frame")
    assert content == [{"type": "text", "text": "x.o"}, {"type": "image_url", "image_url": {"url": url}}]
    messages = as_messages(content, "user")
    assert messages[0]["content"][1]["image_url"]["url"] == url
    assert observation_content({"board": "x.o", "frame": None}, None, "frame") == "x.o"
    assert observation_content({"board": "x.o"}, None, None) == "x.o"


def test_the_hf_engine_generates_each_turn_with_the_episodes_images_and_the_row_feeds_a_forward(family):
    """The real HF engine (h-vtrain's image inputs) on the tiny VLM: every turn after an image
    observation is generated with the episode's images, and the assembled row's image inputs match
    its image tokens in one forward over prompt + response."""
    from steadyrl.rollout.hf import HFEngine
    from steadyrl.vlm_inputs import collate_image_inputs, model_image_kwargs

    build = build_tiny_qwen2_vl if family.name == "qwen2_vl" else build_tiny_llava
    model, _ = build(family.tok)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():  # turns end at once: each next turn is generated after an image observation
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[family.tok.eos_token_id] = 20.0
    model.lm_head = head
    engine = HFEngine(model, family.tok)
    seen, generate = [], engine.generate

    def recording(prompt_ids, n, **kwargs):
        seen.append([len(x) for x in kwargs.get("images") or []])
        return generate(prompt_ids, n, **kwargs)

    engine.generate = recording
    limits = TurnLimits(max_turns=3, max_new_tokens=4, max_observation_tokens=100, observation_truncation="right",
                        episode_tokens=100)

    class AlwaysPicture:
        def reset(self, **row):
            return None

        def step(self, text):
            return square((0, 255, 0)), 0.0, False

    torch.manual_seed(0)
    gen = run_episodes(engine, family.tok, [prompt(family)], 2, agent=picture_agent(AlwaysPicture), limits=limits,
                       processor=family.processor)
    assert seen == [[1], [2, 2], [3, 3]] and all(e.turns == 3 and not e.failed for e in gen.episodes)
    for row in range(2):
        ids = torch.cat([gen.prompt_ids[row][gen.prompt_mask[row].bool()],
                         gen.response_ids[row][gen.response_mask[row].bool()]]).unsqueeze(0)
        inputs = collate_image_inputs([gen.image_inputs[row]])
        images = 1 + int((gen.response_ids[row] == family.image_token).sum()) // family.per_image
        assert (inputs["image_grid_thw"].shape[0] if "image_grid_thw" in inputs else inputs["pixel_values"].shape[0]) \
            == images
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                           **model_image_kwargs(model.config, ids, inputs, None)).logits
        assert torch.isfinite(logits).all()
