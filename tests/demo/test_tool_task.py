"""The tool demo's task: seeded disjoint splits, transcripts the real hermes parser reads, the
chat tokenizer, the transcript encoding the episode driver would produce, and the reward."""


import pytest

from steadyrl.agents.chat import observation_ids
from steadyrl.agents.parsers import parse_hermes
from steadyrl.agents.tools import load_tools, run_tool
from steadyrl.demo.chat_tokenizer import TOOL_MARKERS, build_chat_tokenizer
from steadyrl.demo.tool_demo import TOOL_SPEC, tool_schemas
from steadyrl.demo.tool_task import (
    direct_transcript,
    episode_answer,
    final_answer,
    format_transcript,
    make_tool_splits,
    tool_answer_reward,
    tool_transcript,
    warmstart_transcripts,
)
from steadyrl.demo.tool_warmstart import encode_transcript, encode_transcripts
from steadyrl.demo.warmstart import IGNORE_INDEX


@pytest.fixture(scope="module")
def splits():
    return make_tool_splits(300, 100, seed=3)


@pytest.fixture(scope="module")
def tokenizer(splits):
    plain = build_chat_tokenizer(["x"])
    corpus = [plain.apply_chat_template(t, tools=tool_schemas(), tokenize=False)
              for t in warmstart_transcripts(splits[0], 0.5, seed=0)]
    return build_chat_tokenizer(corpus)


def test_splits_are_disjoint_seeded_and_exact(splits):
    train, held_out = splits
    assert len(train) == 300 and len(held_out) == 100
    questions = [r["prompt"][0]["content"] for r in train]
    assert len(set(questions)) == 300
    assert set(questions).isdisjoint(r["prompt"][0]["content"] for r in held_out)
    assert make_tool_splits(300, 100, seed=3) == splits
    assert make_tool_splits(300, 100, seed=4) != splits
    for r in train + held_out:
        assert r["prompt"] == [{"role": "user", "content": f"What is {r['a']}*{r['b']}?"}]
        assert r["answer"] == str(r["a"] * r["b"]) and len(r["answer"]) == 5  # one shape for every transcript


def test_asking_for_more_questions_than_exist_is_refused():
    with pytest.raises(ValueError, match="too many"):
        make_tool_splits(30, 30, a_digits=1, b_digits=1)


def test_tool_transcripts_parse_with_the_hermes_parser_and_run_the_real_tool(splits):
    tool = load_tools([TOOL_SPEC])[0]
    for record in splits[0][:20]:
        call_turn, result, answer = tool_transcript(record)[1:]
        parsed = parse_hermes(call_turn["content"])
        assert not parsed.errors and len(parsed.calls) == 1
        call = parsed.calls[0]
        assert call.name == "calculate" == result["name"]
        assert run_tool(tool, call.arguments) == result["content"] == answer["content"] == record["answer"]
        assert parse_hermes(direct_transcript(record)[-1]["content"]).calls == []


def test_warmstart_mix_follows_the_fraction_and_seed(splits):
    mix = warmstart_transcripts(splits[0], 0.2, seed=1)
    tools = sum(len(t) > 2 for t in mix)
    assert 30 <= tools <= 90 and mix == warmstart_transcripts(splits[0], 0.2, seed=1)
    assert all(len(t) == 2 for t in warmstart_transcripts(splits[0], 0.0))


def test_tokenizer_round_trips_and_keeps_the_format_short(tokenizer, splits):
    transcript = tool_transcript(splits[1][0])
    text = tokenizer.apply_chat_template(transcript, tools=tool_schemas(), tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert len(ids) < 60  # the schema, the call's JSON and the wrappers are a few tokens each
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert all(m in tokens for m in TOOL_MARKERS)
    assert [t for t in tokens if t.isdigit()] == [t for t in tokens if t.isdigit() and len(t) == 1]
    kept = tokenizer.decode(ids, skip_special_tokens=True)  # tool markers are not special
    assert "<tool_call>" in kept and "<|im_end|>" not in kept
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    assert tokenizer.decode(tokenizer("héllo ~ 42", add_special_tokens=False)["input_ids"]) == "h<unk>llo ~ 42"


def test_tokenizer_survives_save_and_load(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "<tool_call>\n{\"name\": \"calculate\"}\n</tool_call>"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.chat_template == tokenizer.chat_template


def test_encoding_matches_what_the_episode_driver_appends(tokenizer, splits):
    tools = tool_schemas()
    transcript = tool_transcript(splits[1][1])
    ids, labels = encode_transcript(tokenizer, transcript, tools)
    prompt = tokenizer(tokenizer.apply_chat_template(transcript[:1], tools=tools, add_generation_prompt=True,
                                                     tokenize=False), add_special_tokens=False)["input_ids"]
    call = tokenizer(transcript[1]["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    obs = observation_ids(tokenizer, transcript[:1], transcript[1]["content"], [transcript[2]], tools=tools,
                          end_texts=[tokenizer.eos_token])
    answer = tokenizer(transcript[3]["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert ids == prompt + call + obs + answer
    assert labels == [IGNORE_INDEX] * len(prompt) + call + [IGNORE_INDEX] * len(obs) + answer


def test_padded_rows_keep_each_transcript_and_its_labels(tokenizer, splits):
    tools = tool_schemas()
    pair = [tool_transcript(splits[0][0]), direct_transcript(splits[0][1])]
    rows, mask, labels = encode_transcripts(tokenizer, pair, tools)
    assert rows.shape == mask.shape == labels.shape and mask[1].sum() < mask[0].sum()
    for k, transcript in enumerate(pair):
        ids, row_labels = encode_transcript(tokenizer, transcript, tools)
        n = int(mask[k].sum())
        assert rows[k, :n].tolist() == ids and labels[k, :n].tolist() == row_labels
        assert (labels[k, n:] == IGNORE_INDEX).all()


def test_transcripts_without_an_assistant_turn_are_refused(tokenizer, splits):
    with pytest.raises(ValueError, match="assistant"):
        encode_transcript(tokenizer, splits[0][0]["prompt"])


def test_reward_reads_the_final_turn():
    answer = ["10063"] * 5
    turns = [
        [{"role": "assistant", "content": "10063"}],
        [{"role": "assistant", "content": "<tool_call>..."}, {"role": "tool", "content": "10063"},
         {"role": "assistant", "content": " 10063 "}],
        # cut after the result: the last message is the tool's, not the policy's
        [{"role": "assistant", "content": "<tool_call>..."}, {"role": "tool", "content": "10063"}],
        [{"role": "assistant", "content": "10062"}],
        [],
    ]
    assert tool_answer_reward([""] * 5, [""] * 5, answer, turns=turns) == [1.0, 1.0, 0.0, 0.0, 0.0]
    completions = ["10063", "<tool_call>\n{}\n</tool_call>\nuser\n10063\nassistant\n10063\n", "</tool_call>",
                   "", "1006"]
    assert tool_answer_reward([""] * 5, completions, answer) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert final_answer("a\n b \n\n") == "b" and episode_answer([]) == ""
    with pytest.raises(ValueError, match="one length"):
        tool_answer_reward([""], ["", ""], ["1"])


def test_transcript_formatting_shows_every_message():
    text = format_transcript([{"role": "user", "content": "What is 2*3?"}],
                             [{"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>"},
                              {"role": "tool", "name": "calculate", "content": "6"},
                              {"role": "assistant", "content": "6"}])
    assert text.splitlines()[0] == "  user: What is 2*3?"
    assert "  tool (calculate): 6" in text and text.endswith("assistant: 6")
