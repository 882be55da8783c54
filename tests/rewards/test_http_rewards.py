"""The HTTP reward backends (``http``, ``llm_judge`` with ``backend: openai``) and their client,
against servers the tests start on 127.0.0.1: retries, time limits, garbage replies, failures of
one request or one sample only, the cache, metrics, and the start-up checks."""

import re

import pytest
from support_http import HANG, ScriptedServer, chat_reply, free_port

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardScorer, RewardSpec, load_reward, reward_metrics
from steadyrl.rewards.http_client import RequestFailed, check_reachable, post_json, url_problem

FAST = {"backoff_s": 0.01, "request_timeout_s": 5.0}


def lengths(n, path, body):
    return 200, {"scores": [float(len(c)) for c in body["completions"]]}


# --- the client -------------------------------------------------------------------------------------
def test_a_server_that_fails_twice_then_succeeds_is_retried_with_growing_pauses():
    replies = [(503, {"error": "busy"}), (429, {"error": "slow down"}), (200, {"ok": 1})]
    pauses = []
    with ScriptedServer(lambda n, p, b: replies[n], max_requests=3) as server:
        reply = post_json(server.url, {"x": 1}, retries=3, backoff_s=0.5, sleep=pauses.append)
    assert reply == {"ok": 1}
    assert len(server.requests) == 3 and pauses == [0.5, 1.0]


def test_retry_after_of_a_429_is_honoured_when_longer_than_the_backoff():
    replies = [(429, {}, {"Retry-After": "2"}), (200, {"ok": 1})]
    pauses = []
    with ScriptedServer(lambda n, p, b: replies[n], max_requests=2) as server:
        post_json(server.url, {}, retries=1, backoff_s=0.1, sleep=pauses.append)
    assert pauses == [2.0]


def test_a_4xx_is_not_retried_and_spent_retries_raise_with_the_reason():
    with ScriptedServer(lambda n, p, b: (404, {"error": "no such model"}), max_requests=5) as server:
        with pytest.raises(RequestFailed) as err:
            post_json(server.url, {}, retries=3, sleep=lambda s: None)
    assert err.value.reason == "http_4xx" and len(server.requests) == 1
    with ScriptedServer(lambda n, p, b: (500, {}), max_requests=5) as server:
        with pytest.raises(RequestFailed) as err:
            post_json(server.url, {}, retries=2, sleep=lambda s: None)
    assert err.value.reason == "http_5xx" and len(server.requests) == 3


@pytest.fixture
def socket_timeouts(monkeypatch):
    """The time limit each request was opened with (the mechanism, not the wall clock: the server
    below hangs far longer than any limit, so a reply of reason "timeout" is the limit firing)."""
    import urllib.request

    seen, urlopen = [], urllib.request.urlopen

    def spy(request, *args, timeout=None, **kwargs):
        seen.append(timeout)
        return urlopen(request, *args, timeout=timeout, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", spy)
    return seen


def test_a_server_that_hangs_is_cut_at_the_request_time_limit_without_retry(socket_timeouts):
    with ScriptedServer(lambda n, p, b: HANG, max_requests=2, max_hang_s=60) as server:
        with pytest.raises(RequestFailed) as err:
            post_json(server.url, {}, timeout_s=0.3, retries=3, sleep=lambda s: None)
    assert err.value.reason == "timeout" and socket_timeouts == [0.3] and len(server.requests) == 1


def test_garbage_and_refused_connections_have_their_own_reasons():
    with ScriptedServer(lambda n, p, b: (200, b"<html>not json"), max_requests=1) as server:
        with pytest.raises(RequestFailed) as err:
            post_json(server.url, {}, retries=3, sleep=lambda s: None)
    assert err.value.reason == "bad_reply" and len(server.requests) == 1
    pauses = []
    with pytest.raises(RequestFailed) as err:
        post_json(f"http://127.0.0.1:{free_port()}/", {}, retries=2, backoff_s=0.01, sleep=pauses.append)
    assert err.value.reason == "connection" and len(pauses) == 2


def test_an_unreachable_or_malformed_url_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"my\.url = 'http://127\.0\.0\.1:\d+/x': cannot connect"):
        check_reachable("my.url", f"http://127.0.0.1:{free_port()}/x", timeout_s=1)
    with pytest.raises(ConfigError, match="my.url = 'ftp://host/': its scheme is 'ftp', not http or https; "
                                          "valid: an http:// or https:// URL with a host"):
        check_reachable("my.url", "ftp://host/")


@pytest.mark.parametrize(("url", "problem"), [
    ("http://localhost:8000/score", None), ("https://judge.example.org/v1", None), (" http://h/ ", None),
    ("ftp://host/", "its scheme is 'ftp'"), ("localhost:8000/v1", "its scheme is 'localhost'"),
    ("//host/x", "no scheme"), ("http://", "no host"), ("http:///path", "no host"),
    ("http://h:99999/", "a bad port"), ("", "an empty string"), (8000, "not a URL (a int)"),
])
def test_url_problem_says_what_is_wrong_with_a_server_address(url, problem):
    found = url_problem(url)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found


@pytest.mark.parametrize(("spec", "options", "field"), [
    ("http", {"url": "localhost:8000/score"}, "http reward: option url = 'localhost:8000/score'"),
    ("llm_judge", {"base_url": "ftp://judge/v1", "model": "j"}, "llm_judge reward: option base_url = 'ftp://judge/v1'"),
    ("code", {"backend": "http", "url": "http://"}, "code reward: option url = 'http://'"),
])
def test_a_malformed_server_url_is_refused_when_the_reward_is_built_even_with_check_url_off(spec, options, field):
    # check_url: false skips only the TCP connect, never the check that it is an http(s) URL
    with pytest.raises(ConfigError, match=re.escape(field) + ": .*; valid: an http:// or https:// URL with a host"):
        load_reward(spec, check_url=False, **options)


# --- the http reward --------------------------------------------------------------------------------
def test_http_reward_posts_prompts_completions_and_columns_in_batches():
    with ScriptedServer(lengths, max_requests=3) as server:
        fn = load_reward("http", url=server.url + "/score", batch_size=2, **FAST)
        scores = fn(["p0", "p1", "p2"], ["a", "bb", "ccc"], answer=["x", "y", "z"], source=["s", "s", "t"])
    assert scores == [1.0, 2.0, 3.0]
    bodies = sorted((b for _, b, _ in server.requests), key=lambda b: b["prompts"])
    assert [p for p, _, _ in server.requests] == ["/score", "/score"]
    assert bodies[0] == {"prompts": ["p0", "p1"], "completions": ["a", "bb"], "answer": ["x", "y"],
                         "source": ["s", "s"]}
    assert bodies[1] == {"prompts": ["p2"], "completions": ["ccc"], "answer": ["z"], "source": ["t"]}


def test_http_reward_sends_only_the_named_columns_and_declares_them():
    with ScriptedServer(lengths, max_requests=1) as server:
        fn = load_reward("http", url=server.url, columns=["source"], **FAST)
        fn(["p"], ["a"], answer=["x"], source=["s"])
    assert set(server.requests[0][1]) == {"prompts", "completions", "source"}
    assert fn.reads_columns == ("source",)


def test_a_failing_request_voids_only_its_own_samples_and_is_counted():
    def respond(n, path, body):
        return (500, {}) if body["prompts"] == ["p2", "p3"] else lengths(n, path, body)

    with ScriptedServer(respond, max_requests=6) as server:
        fn = load_reward("http", url=server.url, batch_size=2, retries=1, **FAST)
        scores = fn(["p0", "p1", "p2", "p3"], ["a", "bb", "ccc", "dddd"])
    assert scores == [1.0, 2.0, None, None]
    assert len(server.requests) == 3  # one good batch, the bad one tried twice
    assert fn.metrics()["failures/http_5xx"] == 2.0


@pytest.mark.parametrize("payload", [{"scores": [1.0]}, {"score": [1.0, 2.0]}, {"scores": ["1", 2.0]}, [1.0, 2.0]],
                         ids=["wrong length", "wrong key", "a string score", "a bare list"])
def test_a_reply_of_the_wrong_shape_voids_its_samples_as_bad_reply(payload):
    with ScriptedServer(lambda n, p, b: (200, payload), max_requests=1) as server:
        fn = load_reward("http", url=server.url, **FAST)
        assert fn(["p0", "p1"], ["a", "b"]) == [None, None]
    assert fn.metrics()["failures/bad_reply"] == 2.0


def test_the_server_may_decline_a_sample_with_null():
    with ScriptedServer(lambda n, p, b: (200, {"scores": [0.5, None]}), max_requests=1) as server:
        fn = load_reward("http", url=server.url, **FAST)
        assert fn(["p0", "p1"], ["a", "b"]) == [0.5, None]
    assert fn.metrics()["failures/server_none"] == 1.0


def test_duplicate_samples_are_scored_once_and_then_come_from_the_cache():
    with ScriptedServer(lengths, max_requests=2) as server:
        fn = load_reward("http", url=server.url, **FAST)
        first = fn(["p", "p", "q"], ["a", "a", "bb"], answer=["1", "1", "2"])
        assert fn.metrics()["cache_hit_rate"] == pytest.approx(1 / 3)
        second = fn(["q", "p", "p"], ["bb", "a", "ccc"], answer=["2", "1", "1"])
        report = fn.metrics()
    assert first == [1.0, 1.0, 2.0] and second == [2.0, 1.0, 3.0]
    assert [b["completions"] for _, b, _ in server.requests] == [["a", "bb"], ["ccc"]]
    assert report["cache_hit_rate"] == pytest.approx(2 / 3) and report["time_s"] > 0


def test_the_cache_key_includes_the_answer_and_a_zero_size_turns_it_off():
    with ScriptedServer(lengths, max_requests=4) as server:
        fn = load_reward("http", url=server.url, **FAST)
        fn(["p"], ["a"], answer=["1"])
        fn(["p"], ["a"], answer=["2"])
        off = load_reward("http", url=server.url, cache_size=0, **FAST)
        off(["p"], ["a"])
        off(["p"], ["a"])
    assert len(server.requests) == 4


def test_http_reward_runs_in_a_thread_and_its_metrics_reach_reward_metrics():
    with ScriptedServer(lengths, max_requests=1) as server:
        spec = RewardSpec.load("http", url=server.url, **FAST)
        assert spec.isolation == "thread"
        with RewardScorer([spec]) as scorer:
            result = scorer.score(["p", "p"], ["a", "a"])
    metrics = reward_metrics(result)
    assert result.raw["http"] == [1.0, 1.0]
    assert metrics["reward/http/cache_hit_rate"] == 0.5 and metrics["reward/http/time_s"] > 0


def test_an_explicit_isolation_wins_over_the_reward_s_preference():
    with ScriptedServer(lengths, max_requests=2) as server:
        spec = RewardSpec.load("http", url=server.url, isolation="process", **FAST)
        with RewardScorer([spec]) as scorer:
            result = scorer.score(["p"], ["abc"])
    assert spec.isolation == "process" and result.raw["http"] == [3.0]
    # the object that scored lives in the worker: its report comes back with the batch
    assert result.metrics["reward/http/cache_hit_rate"] == 0.0 and result.metrics["reward/http/time_s"] > 0


def test_http_reward_checks_its_url_at_start_up_unless_told_not_to():
    url = f"http://127.0.0.1:{free_port()}/score"
    with pytest.raises(ConfigError, match="http reward: option url = .*cannot connect"):
        load_reward("http", url=url)
    fn = load_reward("http", url=url, check_url=False, retries=0, **FAST)
    assert fn(["p"], ["a"]) == [None] and fn.metrics()["failures/connection"] == 1.0


def test_api_keys_come_from_the_named_environment_variable_only(monkeypatch):
    monkeypatch.setenv("MY_REWARD_KEY", "secret-123")
    with ScriptedServer(lengths, max_requests=1) as server:
        fn = load_reward("http", url=server.url, api_key_env="MY_REWARD_KEY", **FAST)
        fn(["p"], ["a"])
    assert server.requests[0][2]["Authorization"] == "Bearer secret-123"
    assert "secret" not in repr(fn)
    monkeypatch.delenv("MY_REWARD_KEY")
    with pytest.raises(ConfigError, match="api_key_env='MY_REWARD_KEY' names an environment variable that is not set"):
        load_reward("http", url="http://127.0.0.1:1/", api_key_env="MY_REWARD_KEY", check_url=False)
    with pytest.raises(ConfigError, match="NAME of an environment variable") as err:
        load_reward("http", url="http://127.0.0.1:1/", api_key_env="sk-abc/def", check_url=False)
    assert "sk-abc" not in str(err.value)


# --- llm_judge over an OpenAI-compatible endpoint ----------------------------------------------------
def judge(server, **options):
    return load_reward("llm_judge", base_url=server.url + "/v1", model="judge-1", **{**FAST, **options})


def test_judge_fills_the_template_and_maps_the_score_to_0_1():
    with ScriptedServer(lambda n, p, b: (200, chat_reply("Score: 7")), max_requests=1) as server:
        fn = judge(server, template="Q: {prompt} A: {completion} Gold: {answer} {{json}}", system_prompt="Be strict.")
        assert fn(["2+2?"], ["4"], answer=["4"]) == [pytest.approx(0.7)]
    path, body, _ = server.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "judge-1" and body["temperature"] == 0.0
    assert body["messages"] == [{"role": "system", "content": "Be strict."},
                                {"role": "user", "content": "Q: 2+2? A: 4 Gold: 4 {{json}}"}]


def test_judge_score_parsing_range_and_pattern():
    replies = {"a": "I give it 3, final 9", "b": "no number here", "c": "42", "d": "[[RATING: 2]] then 8"}
    with ScriptedServer(lambda n, p, b: (200, chat_reply(replies[b["messages"][-1]["content"][-1]])),
                        max_requests=8) as server:
        last_number = judge(server, template="{completion}")
        assert last_number(["p"] * 4, ["a", "b", "c", "d"]) == [0.9, None, None, 0.8]
        report = last_number.metrics()
        assert report["failures/out_of_range"] == 1.0 and report["failures/parse"] == 1.0
        assert report["cache_hit_rate"] == 0.0
        raw = judge(server, template="{completion}", pattern=r"RATING: (\d+)", scale=False, min_score=1, max_score=5)
        assert raw(["p"] * 2, ["d", "a"]) == [2.0, None]


def test_judge_failures_void_only_their_samples_with_concurrency():
    def respond(n, path, body):
        return (500, {}) if "bad" in body["messages"][-1]["content"] else (200, chat_reply("10"))

    with ScriptedServer(respond, max_requests=10) as server:
        fn = judge(server, template="{completion}", concurrency=4, retries=1)
        assert fn(["p"] * 4, ["ok1", "bad", "ok2", "ok3"]) == [1.0, None, 1.0, 1.0]
    assert len(server.requests) == 5 and fn.metrics()["failures/http_5xx"] == 1.0


def test_judge_with_a_hanging_server_fails_within_the_request_time_limit(socket_timeouts):
    with ScriptedServer(lambda n, p, b: HANG, max_requests=2, max_hang_s=60) as server:
        fn = judge(server, template="{completion}", request_timeout_s=0.3)
        assert fn(["p", "p"], ["a", "b"]) == [None, None]
    assert fn.metrics()["failures/timeout"] == 2.0 and socket_timeouts[-2:] == [0.3, 0.3]


def test_judge_garbage_reply_and_missing_answer_are_counted():
    with ScriptedServer(lambda n, p, b: (200, {"id": "x"}), max_requests=1) as server:
        fn = judge(server)  # the default template asks for {answer}
        assert fn.reads_columns == ("answer",)
        assert fn(["p", "p"], ["a", "b"], answer=["1", None]) == [None, None]
    report = fn.metrics()
    assert report["failures/bad_reply"] == 1.0 and report["failures/no_answer"] == 1.0 and len(server.requests) == 1
    assert fn.metrics() == {}  # counts since the last report


def test_judge_bad_options_are_refused_at_load(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ConfigError, match="option base_url = .*cannot connect"):
        load_reward("llm_judge", base_url=url, model="m")
    monkeypatch.delenv("JUDGE_KEY_NOT_SET", raising=False)
    with pytest.raises(ConfigError, match="JUDGE_KEY_NOT_SET"):
        load_reward("llm_judge", base_url=url, model="m", api_key_env="JUDGE_KEY_NOT_SET")
    bad = [({"backend": "remote"}, "backend='remote'"), ({"pattern": r"\d+"}, "exactly one group"),
           ({"pattern": "("}, "not a valid regular expression"), ({"min_score": 5, "max_score": 5}, "greater than"),
           ({"template": "no placeholder"}, "{completion}"), ({"concurrency": 0}, "concurrency=0"),
           ({"pattern": 7}, "pattern=7: Input should be a valid string")]
    for options, message in bad:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("{", r"\{")):
            load_reward("llm_judge", base_url=url, model="m", check_url=False, **options)
