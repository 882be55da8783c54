"""benchmarks/gpu_check.py's logic on the CPU with a tiny Qwen2 (``--tiny --device cpu``): the
settings that keep small updates move the weights like float32, plain AdamW on bfloat16 does not,
the table names every setting, and the state bytes are counted from the tensors."""

from __future__ import annotations

import pytest
import torch

from benchmarks import gpu_check

ARGS = ["--tiny", "--device", "cpu", "--prompts", "2", "--group", "2", "--new-tokens", "4", "--prompt-len", "4",
        "--no-trl"]


def test_state_bytes_count_weights_gradients_and_optimizer_state():
    layer = torch.nn.Linear(4, 4, bias=False)  # 16 float32 weights: 64 bytes, and 64 of gradient
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    assert gpu_check.state_bytes(layer, opt) == 128
    layer(torch.ones(1, 4)).sum().backward()
    opt.step()  # exp_avg and exp_avg_sq: 2 x 64 bytes (the scalar step is not counted)
    assert gpu_check.state_bytes(layer, opt) == 256


def test_the_table_names_every_setting_and_marks_missing_cuda_memory():
    row = {"setting": "bfloat16 + kahan", "stored": "bfloat16", "computed": "bfloat16", "moved": 0.9876,
           "s_per_step": 0.5, "peak_gib": None, "state_bytes": 3 * 2**20}
    text = gpu_check.table([row])
    assert "| bfloat16 + kahan | bfloat16 | bfloat16 | 98.76% | 0.500 | n/a | 3.0 MiB |" in text


@pytest.mark.slow
def test_on_a_tiny_model_the_default_and_the_lean_options_move_like_float32():
    args = gpu_check.parse(ARGS)
    got = {f"{d} {u}": gpu_check.measure(args, d, u)
           for d, u in [("float32", "kahan"), ("auto", "kahan"), ("bfloat16", "plain"), ("bfloat16", "kahan")]}
    ref = got["float32 kahan"]["moved"]
    assert ref > 0.9
    assert abs(got["auto kahan"]["moved"] - ref) < 0.03 and got["auto kahan"]["computed"] == "bfloat16"
    assert abs(got["bfloat16 kahan"]["moved"] - ref) < 0.03
    assert got["bfloat16 plain"]["moved"] < 0.2
    assert got["bfloat16 kahan"]["state_bytes"] < got["float32 kahan"]["state_bytes"]


def test_cuda_asked_for_without_a_gpu_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert gpu_check.main(["--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_the_optimizer_comparison_counts_bytes_and_moved_weights():
    from benchmarks import bench_precision_optim as bench

    kahan = bench.run(10_000, 3, "bfloat16", "kahan")
    plain = bench.run(10_000, 3, "bfloat16", "adamw")
    fp32 = bench.run(10_000, 3, "float32", "adamw")
    assert kahan["moved"] == fp32["moved"] == 1.0 and plain["moved"] < 0.1
    assert (fp32["bytes"], kahan["bytes"], plain["bytes"]) == (16, 12, 8)


def test_the_speed_sections_run_on_a_tiny_model_and_print_every_path_and_cache(capsys):
    assert gpu_check.main([*ARGS, "--sections", "logprobs,generate", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    for impl in ("fused", "chunked_grad", "naive"):
        assert f"| 64 | {impl} |" in out and f"| 256 | {impl} |" in out
    assert "| generate, cache dynamic | 16 |" in out and "1.00x" in out
    assert "generate, cache static" in out


def test_an_unknown_section_exits_2_naming_the_valid_ones(capsys):
    assert gpu_check.main([*ARGS, "--sections", "logprobs,speed"]) == 2
    assert "valid: precision, logprobs, generate" in capsys.readouterr().err


def test_the_log_prob_table_compares_with_naive_and_trl_and_marks_out_of_memory():
    from benchmarks.gpu_check_speed import logprob_table

    rows = [{"impl": "chunked_grad", "tokens": 32768, "s": 0.09, "extra_gib": 1.0},
            {"impl": "naive", "tokens": 32768, "oom": True},
            {"impl": "trl", "tokens": 32768, "s": 0.075, "extra_gib": 27.8}]
    text = logprob_table(rows)
    assert "| 32,768 | chunked_grad | 90.0 | 1.00 | - | 1.20x | 0.036x |" in text
    assert "| 32,768 | naive | OOM | OOM | - | - | - |" in text


def test_a_logprob_measurement_reports_time_and_no_cuda_memory_on_the_cpu():
    from benchmarks.gpu_check_speed import _logprob_fn, time_logprobs

    r = time_logprobs(_logprob_fn("chunked_grad"), 16, 8, 32, torch.device("cpu"), torch.bfloat16, reps=1)
    assert r["tokens"] == 16 and r["s"] > 0 and r["extra_gib"] is None
