"""The configuration docs stay true to the code: docs/configuration.md is exactly what
tools/gen_config_docs.py generates, every steadyrl key that docs/migrating.md and
docs/troubleshooting.md name exists, every metric they name is in docs/metrics.md, and every
YAML example loads as a config."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from steadyrl.config import Config, load_config
from steadyrl.config.loading import _all_paths
from steadyrl.config.schema import RewardConfig
from steadyrl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
KEYS = set(_all_paths(Config)) | {f"rewards[].{name}" for name in RewardConfig.model_fields}
SECTIONS = set(Config.model_fields)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", REPO / "tools" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_the_generated_one():
    generated = _generator().render()
    committed = (DOCS / "configuration.md").read_text()
    assert committed == generated, "docs/configuration.md is stale: run python tools/gen_config_docs.py"


def test_the_option_tables_of_the_rewards_page_are_the_generated_ones():
    committed = (DOCS / "rewards.md").read_text()
    assert committed == _generator().render_rewards(committed), "docs/rewards.md is stale: run python tools/gen_config_docs.py"


def test_the_rewards_page_has_a_generated_option_table_for_every_built_in():
    from steadyrl.config.reward_options import REWARD_OPTIONS

    blocks = _generator().OPTIONS_BLOCK.findall((DOCS / "rewards.md").read_text())
    # normalized_match's options are exact_match's but strip, said beside exact_match's table
    assert sorted(name for _, name, _ in blocks) == sorted(set(REWARD_OPTIONS) - {"normalized_match"})


def test_configuration_page_lists_every_key_with_its_default_and_help():
    text = (DOCS / "configuration.md").read_text()
    for path in KEYS - {"rewards"}:
        if any(path == s or path.startswith(f"{s}.") and _is_section(path) for s in SECTIONS):
            continue
        assert f"| `{path}` |" in text, path


def _is_section(path: str) -> bool:
    node = Config
    for part in path.split("."):
        field = node.model_fields.get(part)
        if field is None:
            return False
        node = field.annotation
    return isinstance(node, type) and hasattr(node, "model_fields")


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown tables as lists of rows of cells (header included, separator dropped)."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _steadyrl_column(path: Path) -> list[list[str]]:
    """The other-trainer name and the steadyrl cell of every row of the mapping tables."""
    rows = []
    for table in _tables(path.read_text()):
        header = [h.lower() for h in table[0]]
        if any("steadyrl" in h for h in header):
            col = next(i for i, h in enumerate(header) if "steadyrl" in h)
            rows += [[row[0], row[col]] for row in table[1:]]
    return rows


def _keys_in(cell: str) -> list[str]:
    cell = re.sub(r"\([^)]*\)", "", cell)  # defaults in parentheses
    return [span for span in re.findall(r"`([^`]+)`", cell) if not span.startswith("-")]


def test_every_steadyrl_key_in_the_migration_tables_exists():
    rows = _steadyrl_column(DOCS / "migrating.md")
    named = [key for _, cell in rows for key in _keys_in(cell)]
    assert len(rows) > 60 and len(named) > 70
    unknown = sorted({key for key in named if key not in KEYS})
    assert unknown == []


TRL_NAMES = [
    "learning_rate", "num_generations", "max_completion_length", "beta", "epsilon", "epsilon_high",
    "loss_type", "scale_rewards", "temperature", "top_p", "num_iterations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_grad_norm", "mask_truncated_completions", "entropy_coef",
    "tools", "max_tool_calling_iterations", "environment_factory", "vllm_importance_sampling_clip_max",
]
VERL_NAMES = [
    "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode", "use_kl_loss",
    "kl_loss_coef", "kl_loss_type", "algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_ctrl.target_kl",
    "data.train_batch_size", "rollout.n", "response_length", "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu", "ppo_epochs", "critic.cliprange_value", "algorithm.gamma",
    "algorithm.lam", "entropy_coeff", "multi_turn.enable", "multi_turn.max_assistant_turns",
    "multi_turn.tool_config_path", "multi_turn.format", "multi_turn.max_tool_response_length",
    "multi_turn.tool_response_truncate_side", "multi_turn.interaction_config_path", "lr_scheduler_type",
]


@pytest.mark.parametrize("name", TRL_NAMES + VERL_NAMES)
def test_the_migration_tables_cover_the_common_names(name):
    firsts = " ".join(first for first, _ in _steadyrl_column(DOCS / "migrating.md"))
    assert re.search(rf"`(?:[\w.]*\.)?{re.escape(name)}`", firsts), name


def _yaml_blocks(path: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("page", ["configuration.md", "migrating.md"])
def test_every_yaml_example_is_a_valid_config(page, tmp_path):
    blocks = _yaml_blocks(DOCS / page)
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.yaml"
        path.write_text(block)
        load_config(path)


def _metrics() -> set[str]:
    return set(re.findall(r"`([a-z_]+/[^`\s]+)`", (DOCS / "metrics.md").read_text()))


def test_troubleshooting_names_only_real_metrics_and_keys():
    text = (DOCS / "troubleshooting.md").read_text()
    spans = re.findall(r"`([^`]+)`", text)
    metrics = [s for s in spans if re.fullmatch(r"[a-z_]+/[\w<>@/]+", s)]
    keys = [re.split(r"[:=]", s)[0].strip() for s in spans if s.split(".")[0] in SECTIONS | {"rewards[]"}]
    assert len(metrics) >= 15 and len(keys) >= 30
    assert sorted(set(metrics) - _metrics()) == []
    assert sorted(k for k in set(keys) if k not in KEYS) == []


@pytest.mark.parametrize("metric", [
    "health/skipped_steps", "actor/grad_norm", "kl/k3", "kl/coef", "actor/entropy", "batch/zero_std_group_frac",
    "batch/valid_sample_frac", "reward/valid_frac", "reward/<name>/failed", "response/truncated_frac",
    "time/generate_s", "time/score_s", "time/update_s",
])
def test_troubleshooting_covers_the_main_symptoms(metric):
    assert f"`{metric}`" in (DOCS / "troubleshooting.md").read_text()


def _names_in(cell: str) -> list[str]:
    """The backticked names of a first-column cell, defaults dropped; ``.name`` after
    ``custom_reward_function.path`` is ``custom_reward_function.name``."""
    names: list[str] = []
    for span in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)):
        if span.startswith(".") and names:
            span = names[-1].rsplit(".", 1)[0] + span
        names.append(span)
    return names


def _migration_cases() -> list[tuple[str, str, list[str]]]:
    """(how a user would write the name, which table, what the error must name), for every name in
    the first column of docs/migrating.md's tables that is not a steadyrl key itself."""
    text = (DOCS / "migrating.md").read_text()
    verl_at = text.index("## From verl")
    cases = []
    for table in _tables(text):
        header = [h.lower() for h in table[0]]
        if not any("steadyrl" in h for h in header):
            continue
        col = next(i for i, h in enumerate(header) if "steadyrl" in h)
        whose = "verl" if text.index("| " + " | ".join(table[1])) > verl_at else "TRL"
        for row in table[1:]:
            wanted = re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", row[col])) or ["nothing"]
            for name in _names_in(row[0]):
                writings = [name]
                if whose == "TRL":  # no sections in TRL: a name goes anywhere
                    writings.append(f"trainer.{name}")
                elif name.split(".")[0] in {"actor", "rollout", "ref", "model"}:
                    writings.append(f"actor_rollout_ref.{name}")  # the docs drop this prefix
                cases += [(w, whose, wanted) for w in writings if w not in KEYS]
    return cases


MIGRATION_CASES = _migration_cases()


def test_the_migration_tables_were_read():
    assert len(MIGRATION_CASES) > 150
    assert ("trainer.total_epochs", "verl", ["trainer.max_steps", "trainer.max_epochs"]) in MIGRATION_CASES


@pytest.mark.parametrize(("written", "whose", "wanted"), MIGRATION_CASES, ids=[c[0] for c in MIGRATION_CASES])
def test_every_name_in_the_migration_tables_gets_its_steadyrl_key(written, whose, wanted):
    """The error for another trainer's name names a key (or flag) of its row in docs/migrating.md,
    so the table in steadyrl/config/foreign.py and the docs cannot drift apart."""
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{written}=1"])
    message = str(info.value)
    assert "unknown config key" in message and "valid keys here" not in message, message
    assert any(key in message for key in wanted), (wanted, message)


def test_the_metrics_page_says_the_first_row_is_the_step_0_evaluation():
    """metrics.jsonl starts with the evaluation before training at step 0 (tests/cli/test_train_eval.py
    checks the file); the page must not say that steps start at 1 and stop there."""
    row = next(line for line in (DOCS / "metrics.md").read_text().splitlines() if line.startswith("| `step` |"))
    assert "step 0" in row and "evaluation before" in row


def test_trls_cispo_epsilon_high_is_mapped_to_pg_clip_high_minus_one():
    """TRL's cispo caps the weight at epsilon_high itself; steadyrl's pg_clip_high is relative
    (1 + value): the migration guide and the unknown-key advice both say so."""
    from steadyrl.config.foreign import FOREIGN_NAMES

    row = next(line for line in (DOCS / "migrating.md").read_text().splitlines() if line.startswith("| `epsilon_high`"))
    assert "cispo" in row and "pg_clip_high = epsilon_high - 1" in row
    assert "pg_clip_high = epsilon_high - 1" in FOREIGN_NAMES["epsilon_high"][1]


def test_the_option_tables_of_the_environments_page_are_the_generated_ones():
    from steadyrl.envs.options import ENV_OPTIONS

    committed = (DOCS / "environments.md").read_text()
    assert committed == _generator().render_environments(committed), \
        "docs/environments.md is stale: run python tools/gen_config_docs.py"
    blocks = _generator().OPTIONS_BLOCK.findall(committed)
    assert sorted(name for _, name, _ in blocks) == sorted(ENV_OPTIONS)
