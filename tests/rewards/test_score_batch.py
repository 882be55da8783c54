"""score_batch / RewardScorer: weighted sums, validity, failure kinds, time limits, isolation."""

import math
import os
import sys
import threading
import time

import pytest
import torch

from steadyrl.errors import ConfigError
from steadyrl.rewards import RewardScorer, RewardSpec, load_reward, reward_metrics, score_batch

PROMPTS = ["p0", "p1", "p2", "p3"]
COMPLETIONS = ["a", "bb", "ccc", "dddd"]


def length(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


def ones(prompts, completions, **kwargs):
    return [1.0] * len(completions)


def holes(prompts, completions, **kwargs):
    return [1.0, None, float("nan"), float("inf")]


def raises(prompts, completions, **kwargs):
    raise ValueError("bad reward")


RELEASE = threading.Event()  # lets abandoned threads of the thread-isolation test finish


def sleeps(prompts, completions, **kwargs):
    RELEASE.wait(30)
    return [1.0] * len(completions)


def spins(prompts, completions, **kwargs):
    while not RELEASE.is_set():
        pass
    return [1.0] * len(completions)


def too_short(prompts, completions, **kwargs):
    return [1.0]


def exits(prompts, completions, **kwargs):
    sys.exit(4)


def hard_exits(prompts, completions, **kwargs):
    os._exit(7)


def mutates(prompts, completions, answer, **kwargs):
    completions.clear()
    answer.clear()
    return [0.0] * 4


def numpy_and_tensor(prompts, completions, **kwargs):
    import numpy as np

    return torch.tensor([1.0, 2.0, 3.0, 4.0]) if len(completions) == 4 else np.ones(len(completions))


def returns_text(prompts, completions, **kwargs):
    return ["1.0"] * len(completions)


def counter():
    calls = []

    def count(prompts, completions, **kwargs):
        calls.append(1)
        return [float(len(calls))] * len(completions)

    return count


def spec(fn, **kw):
    """A spec calling ``fn`` on the whole batch at once (the functions above are written per batch);
    the tests of chunked calls pass ``chunk_size``."""
    kw.setdefault("chunk_size", None)
    return RewardSpec(kw.pop("name", fn.__name__), fn, **kw)


@pytest.mark.parametrize("isolation", ["process", "thread", "inline"])
def test_scores_are_the_weighted_sum_of_the_functions(isolation):
    result = score_batch([spec(length, weight=0.5), spec(ones, weight=-2.0)], PROMPTS, COMPLETIONS,
                         isolation=isolation)
    assert result.scores.dtype == torch.float64
    assert result.scores.tolist() == [-1.5, -1.0, -0.5, 0.0]
    assert result.valid.tolist() == [True] * 4
    assert result.raw["length"] == [1.0, 2.0, 3.0, 4.0]
    assert result.errors == {}
    assert all(result.failed(n) == 0 for n in result.names)


def test_nan_and_inf_invalidate_only_their_samples_and_none_beside_a_score_does_not_apply():
    result = score_batch([spec(ones), spec(holes)], PROMPTS, COMPLETIONS, isolation="inline")
    assert result.valid.tolist() == [True, True, False, False]  # sample 1: holes' None, ones' score (TRL's idiom)
    assert result.scores.tolist() == [2.0, 1.0, 0.0, 0.0]
    assert not torch.isnan(result.scores).any()
    assert result.failures["holes"] == {"exception": 0, "timeout": 0, "none": 0, "nonfinite": 2}
    assert result.applies("holes") == [True, False, True, True]
    assert math.isnan(result.raw["holes"][2])  # raw keeps what the function said


@pytest.mark.parametrize("isolation", ["process", "thread", "inline"])
def test_an_exception_never_escapes_and_keeps_its_traceback(isolation):
    result = score_batch([spec(ones), spec(raises), spec(exits)], PROMPTS, COMPLETIONS, isolation=isolation)
    assert result.valid.tolist() == [False] * 4
    assert result.scores.tolist() == [0.0] * 4
    assert result.failures["raises"]["exception"] == 4
    assert "Traceback" in result.errors["raises"] and "ValueError: bad reward" in result.errors["raises"]
    assert "in raises" in result.errors["raises"]  # the frame of the user's function
    assert "SystemExit: 4" in result.errors["exits"]
    assert result.failed("ones") == 0 and "ones" not in result.errors


def test_a_list_of_the_wrong_length_invalidates_the_whole_batch():
    result = score_batch([spec(ones), spec(too_short)], PROMPTS, COMPLETIONS, isolation="inline")
    assert result.valid.tolist() == [False] * 4
    assert result.failures["too_short"]["exception"] == 4
    assert "returned 1 scores for a batch of 4" in result.errors["too_short"]
    assert result.raw["too_short"] == [None] * 4


def test_array_outputs_are_accepted_and_text_outputs_are_not():
    result = score_batch([spec(numpy_and_tensor), spec(returns_text)], PROMPTS, COMPLETIONS, isolation="inline")
    assert result.raw["numpy_and_tensor"] == [1.0, 2.0, 3.0, 4.0]
    assert "score 0 is a str" in result.errors["returns_text"]


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_call_past_its_time_limit_is_a_timeout_and_others_still_count(isolation):
    RELEASE.clear()
    try:
        result = score_batch(
            [spec(sleeps, timeout_s=0.3), spec(spins, timeout_s=0.3), spec(length, timeout_s=30)],
            PROMPTS, COMPLETIONS, isolation=isolation,
        )
    finally:
        RELEASE.set()
    # the limits fired (a sleeper left alone returns 1.0 after 30 s; a spinner never returns)
    assert result.failures["sleeps"]["timeout"] == 4 and result.failures["spins"]["timeout"] == 4
    assert "timed out after 0.3 s" in result.errors["sleeps"]
    killed = "worker process and everything it started were killed"
    expected = killed if isolation == "process" else "1 such call(s) still running"
    assert expected in result.errors["spins"]
    assert result.raw["length"] == [1.0, 2.0, 3.0, 4.0]
    assert result.valid.tolist() == [False] * 4


def test_process_isolation_survives_a_hard_exit_and_forks_a_new_worker():
    fn = counter()
    with RewardScorer([spec(hard_exits), spec(fn, name="count")], isolation="process") as scorer:
        first = scorer.score(PROMPTS, COMPLETIONS)
        assert "worker process died (exit status 7)" in first.errors["hard_exits"]
        second = scorer.score(PROMPTS, COMPLETIONS)
        assert second.failures["hard_exits"]["exception"] == 4
    # the function's state lives in its worker, kept between batches of one scorer
    assert first.raw["count"] == [1.0] * 4 and second.raw["count"] == [2.0] * 4


def test_a_timed_out_worker_is_replaced_for_the_next_batch():
    state = {"slow": True}

    def sometimes_slow(prompts, completions, **kwargs):
        if state["slow"]:
            time.sleep(30)
        return [1.0] * len(completions)

    with RewardScorer([spec(sometimes_slow, timeout_s=5.0)], isolation="process") as scorer:
        assert scorer.score(PROMPTS, COMPLETIONS).failures["sometimes_slow"]["timeout"] == 4
        state["slow"] = False  # the fresh worker is forked from the trainer as it is now
        assert scorer.score(PROMPTS, COMPLETIONS).valid.all()


def test_functions_get_their_own_copies_of_the_batch():
    answers = ["x"] * 4
    completions = list(COMPLETIONS)
    result = score_batch([spec(mutates), spec(length)], PROMPTS, completions, {"answer": answers},
                         isolation="inline")
    assert result.raw["length"] == [1.0, 2.0, 3.0, 4.0]
    assert completions == COMPLETIONS and answers == ["x"] * 4


def test_columns_reach_the_functions_as_keyword_lists():
    fn = load_reward("math")
    result = score_batch([RewardSpec("math", fn)], ["q", "q"], ["\\boxed{72}", "70"],
                         {"answer": ["#### 72", "#### 72"], "source": ["gsm8k", "gsm8k"]})
    assert result.raw["math"] == [1.0, 0.0]


def test_bad_batches_and_spec_lists_are_refused():
    with pytest.raises(ValueError, match="3 prompts for 4 completions"):
        score_batch([spec(ones)], PROMPTS[:3], COMPLETIONS)
    with pytest.raises(ValueError, match="column 'answer' has 2 values for a batch of 4"):
        score_batch([spec(ones)], PROMPTS, COMPLETIONS, {"answer": [1, 2]})
    with pytest.raises(ValueError, match="may not be named 'completions'"):
        score_batch([spec(ones)], PROMPTS, COMPLETIONS, {"completions": COMPLETIONS})
    with pytest.raises(ConfigError, match="repeated: \\['ones'\\]"):
        score_batch([spec(ones), spec(ones)], PROMPTS, COMPLETIONS)
    with pytest.raises(ConfigError, match="at least one reward function"):
        score_batch([], PROMPTS, COMPLETIONS)


def test_reward_metrics_follow_the_documented_names():
    result = score_batch([spec(length, weight=0.5), spec(holes)], PROMPTS, COMPLETIONS, isolation="inline")
    metrics = reward_metrics(result)
    assert metrics == {
        "reward/length/mean": 2.5,
        "reward/length/failed": 0.0,
        "reward/holes/mean": 1.0,
        "reward/holes/failed": 2.0,
        "reward/mean": 1.25,  # samples 0 (0.5 * 1 + 1) and 1 (0.5 * 2; holes' None: it does not apply)
        "reward/std": 0.25,
        "reward/min": 1.0,
        "reward/max": 1.5,
        "reward/valid_frac": 0.5,
    }


def test_reward_metrics_leave_out_statistics_of_no_sample():
    metrics = reward_metrics(score_batch([spec(raises)], PROMPTS, COMPLETIONS, isolation="inline"))
    assert metrics == {"reward/raises/failed": 4.0, "reward/valid_frac": 0.0}


def test_an_empty_batch_scores_to_empty_tensors():
    result = score_batch([spec(ones)], [], [], isolation="inline")
    assert result.scores.shape == (0,) and result.valid.shape == (0,)
    assert reward_metrics(result) == {"reward/ones/failed": 0.0, "reward/valid_frac": 0.0}


def test_process_isolation_runs_lambdas_closures_and_user_files(tmp_path):
    path = tmp_path / "user_reward.py"
    path.write_text("def starts_with_a(prompts, completions, **kw):\n"
                    "    return [float(c.startswith('a')) for c in completions]\n")
    offset = 0.25
    specs = [
        RewardSpec("lam", lambda prompts, completions, **kw: [offset] * len(completions)),
        RewardSpec.load(f"{path}:starts_with_a"),
    ]
    result = score_batch(specs, PROMPTS, COMPLETIONS, isolation="process")
    assert result.scores.tolist() == [1.25, 0.25, 0.25, 0.25]


def test_an_unpicklable_column_fails_only_in_process_isolation():
    columns = {"lock": [threading.Lock()] * 4}
    with RewardScorer([spec(ones)], isolation="process") as scorer:
        failed = scorer.score(PROMPTS, COMPLETIONS, columns)
        assert "every column must be picklable" in failed.errors["ones"]
        assert scorer.score(PROMPTS, COMPLETIONS).valid.all()  # the worker is unharmed
    assert score_batch([spec(ones)], PROMPTS, COMPLETIONS, columns, isolation="thread").valid.all()


def test_gsm8k_records_scored_by_the_math_verifier(tmp_path):
    from steadyrl.data import load_records

    path = tmp_path / "gsm8k.jsonl"
    path.write_text(
        '{"question": "48 clips in April, half as many in May. Total?", "answer": "48/2 = 24\\n48+24 = 72\\n#### 72"}\n'
        '{"question": "A big sum?", "answer": "#### 1,234"}\n'
    )
    records = load_records(path, prompt_key="question")
    group = [r for r in records for _ in range(2)]  # two samples per prompt, groups contiguous
    completions = ["So the total is \\boxed{72}.", "The total is 70.", "The answer is 1234", "about 1,000"]
    columns = {"answer": [r["answer"] for r in group]}
    result = score_batch([RewardSpec.load("math")], [r["prompt"] for r in group], completions, columns)
    assert result.raw["math"] == [1.0, 0.0, 1.0, 0.0]
    assert result.valid.all()


def _gone(tag: str) -> bool:
    """No live process carries ``STEADYRL_SANDBOX=<tag>`` (a process of the sandbox knows only its
    pid in the sandbox's own pid namespace, so it is found by the sandbox's tag)."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if f"STEADYRL_SANDBOX={tag}\0".encode() not in f.read():
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().split(")")[-1].split()[0] != "Z":  # a zombie waiting for init is dead
                    return False
        except OSError:
            continue
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_timeout_in_process_isolation_also_kills_what_the_function_spawned(tmp_path):
    pid_file = tmp_path / "pid"

    def spawns(prompts, completions, **kwargs):
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        pid_file.write_text(str(child.pid))
        child.wait()
        return [1.0] * len(completions)

    result = score_batch([spec(spawns, timeout_s=1.0)], PROMPTS, COMPLETIONS, isolation="process")
    assert result.failures["spawns"]["timeout"] == 4
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 60  # a hang guard, not a speed bound: the loop ends when it is gone
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(pid)


def test_an_interrupted_wait_does_not_leave_a_stale_reply_for_the_next_batch(monkeypatch):
    from steadyrl.rewards import runners

    def interrupted(self, timeout_s):
        raise KeyboardInterrupt

    with RewardScorer([spec(length)], isolation="process") as scorer:
        with monkeypatch.context() as m:
            m.setattr(runners._ProcessCall, "wait", interrupted)
            with pytest.raises(KeyboardInterrupt):
                scorer.score(PROMPTS, COMPLETIONS)  # the reply to this batch is never read
        result = scorer.score(PROMPTS[:2], COMPLETIONS[:2])
    assert result.raw["length"] == [1.0, 2.0]


def test_huge_finite_rewards_stay_valid_and_an_overflowing_sum_is_counted():
    def huge(prompts, completions, **kw):
        return [1e300, 1e300, 1.0]

    result = score_batch([spec(huge, name="a"), spec(huge, name="b", weight=1e10)], ["p"] * 3, ["c"] * 3)
    assert result.valid.tolist() == [False, False, True]  # 1e300 + 1e310 overflows float64
    assert result.failures["b"]["nonfinite"] == 2 and result.failures["a"]["nonfinite"] == 0
    alone = score_batch([spec(huge, name="a")], ["p"] * 3, ["c"] * 3)
    assert alone.valid.all() and alone.scores[0] == 1e300


def test_a_function_is_called_once_per_sample_by_default_and_once_per_batch_with_chunk_size_none():
    sizes = []

    def records(prompts, completions, **kw):
        sizes.append(len(completions))
        return [float(len(c)) for c in completions]

    for chunk_size, expected in [(1, [1, 1, 1, 1]), (3, [3, 1]), (None, [4])]:
        sizes.clear()
        spec = RewardSpec("r", records, isolation="inline", chunk_size=chunk_size)
        result = score_batch([spec], PROMPTS, COMPLETIONS)
        assert sizes == expected and result.raw["r"] == [1.0, 2.0, 3.0, 4.0]
    assert RewardSpec("r", records).chunk_size == 1


def test_an_exception_in_one_chunk_fails_only_its_samples():
    def picky(prompts, completions, **kw):
        if "ccc" in completions:
            raise ValueError("cannot parse ccc")
        return [1.0] * len(completions)

    result = score_batch([RewardSpec("r", picky, chunk_size=2, isolation="inline")], PROMPTS, COMPLETIONS)
    assert result.valid.tolist() == [True, True, False, False]
    assert result.failures["r"]["exception"] == 2 and "cannot parse ccc" in result.errors["r"]


def test_a_thread_time_out_keeps_the_scores_already_made_and_stops_after_the_current_call():
    calls, release = [], threading.Event()

    def slow_third(prompts, completions, **kw):
        calls.append(completions[0])
        if completions[0] == "ccc":
            release.wait(60)  # held until the batch has given up on it, however slow the machine
        return [1.0]

    before = set(threading.enumerate())
    result = score_batch([RewardSpec("r", slow_third, timeout_s=2.0, isolation="thread")], PROMPTS, COMPLETIONS)
    release.set()
    assert result.raw["r"] == [1.0, 1.0, None, None]
    assert result.failures["r"]["timeout"] == 2 and "2 of 4 samples were scored before" in result.errors["r"]
    for thread in set(threading.enumerate()) - before:  # the abandoned call runs to its end...
        if thread.name == "steadyrl-reward":
            thread.join(60)
    assert calls == ["a", "bb", "ccc"]  # ...and "dddd" is never scored in the background


@pytest.mark.parametrize("part", [
    {"start": 0, "stop": 9, "status": "ok", "scores": [1.0] * 9},  # past the batch
    {"start": 0, "stop": 2, "status": "ok", "scores": "1.0"},
    {"start": 0, "stop": 2, "status": "ok", "scores": ["1", True]},
    {"start": "0", "stop": 2, "status": "ok", "scores": [1.0, 1.0]},
    ["not", "a", "dict"],
])
def test_a_malformed_reply_from_a_worker_fails_its_samples_without_raising(part):
    from steadyrl.rewards.runners import collect

    outcome = collect([part], 2, 1, "ok", None, 0.0)
    assert outcome.status == "exception" and "malformed reply" in outcome.error
    assert outcome.failed == ["exception", "exception"] and outcome.scores == [None, None]


def test_huge_integers_in_a_reply_are_non_finite_scores_not_errors():
    from steadyrl.rewards.runners import collect

    outcome = collect([{"start": 0, "stop": 2, "status": "ok", "scores": [10 ** 400, None]}], 2, None, "ok", None, 0.0)
    assert outcome.status == "ok" and outcome.scores == [math.inf, None]
