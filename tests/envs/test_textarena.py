"""TextArena games as environments: the policy's seat, a seeded opponent that replays the same game
for the same moves, the game's own reward at the end, rows of game starts with disjoint seeds,
and bad specs refused before any model loads."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("textarena", reason="pip install 'steadyrl[textarena]'")

from steadyrl.agents.environment import EnvServer, load_environment  # noqa: E402
from steadyrl.data import load_records  # noqa: E402
from steadyrl.errors import ConfigError  # noqa: E402


def _play(cls, moves, **reset):
    env = cls()
    transcript = [env.reset(**reset)]
    for move in moves:
        observation, reward, done = env.step(move)
        transcript.append(observation)
        if done:
            return transcript, reward
    return transcript, None


def test_the_policy_moves_first_or_second_by_the_game_seed():
    cls = load_environment("textarena:TicTacToe-v0")
    first = cls().reset(seed=9, game_seed=4)
    second = cls().reset(seed=9, game_seed=5)
    assert "You are Player 0" in first and "[Player 1]" not in first
    assert "You are Player 1" in second and "[Player 0]" in second  # the opponent has moved already


def test_the_same_game_seed_and_moves_replay_the_same_game():
    cls = load_environment("textarena:TicTacToe-v0")
    moves = [f"[{i}]" for i in (4, 0, 8, 2, 6, 1, 3, 5, 7)]
    assert _play(cls, moves, seed=1, game_seed=7) == _play(cls, moves, seed=2, game_seed=7)
    games = {str(_play(cls, moves, seed=0, game_seed=s)[0]) for s in range(0, 20, 2)}
    assert len(games) > 1  # the opponent's moves depend on the seed


def test_the_reward_is_the_games_own_outcome_for_the_policys_seat():
    cls = load_environment("textarena:TicTacToe-v0?player=0")
    outcomes = set()
    for game_seed in range(30):
        env = cls()
        env.reset(game_seed=game_seed)
        reward, done, turn = None, False, 0
        while not done:  # play the lowest free cell: sometimes wins, sometimes loses, sometimes draws
            board = env.env.state.game_state["board"]
            cell = next(r * 3 + c for r in range(3) for c in range(3) if board[r][c] == "")
            _, reward, done = env.step(f"[{cell}]")
            turn += 1
        rewards, _ = env.env.close()
        assert reward == float(rewards[0]) and reward in (-1.0, 0.0, 1.0)
        outcomes.add(reward)
    assert outcomes == {-1.0, 0.0, 1.0}


def test_two_invalid_moves_lose_the_game():
    cls = load_environment("textarena:ConnectFour-v0?player=0")
    observation, reward, done = None, None, False
    env = cls()
    env.reset(game_seed=0)
    observation, reward, done = env.step("I pass")
    assert not done and "invalid move" in observation
    observation, reward, done = env.step("still passing")
    assert done and reward == -1.0


def test_a_single_player_game_needs_no_opponent_and_runs_through_the_env_server():
    server = EnvServer(load_environment("textarena:GuessTheNumber-v0"), "user")
    first = server(("reset", {"prompt": "p", "game_seed": 3}, 11))
    assert first[0]["role"] == "user" and "Guess The Number" in first[0]["content"]
    messages, reward, done = server(("step", "[10]"))
    assert messages and reward is None and not done
    server(("close",))


def test_game_rows_have_disjoint_train_and_held_out_seeds():
    spec = "textarena:TicTacToe-v0?size=12&test_size=5&seed=2"
    train, held_out = load_records(spec), load_records(spec, split="test")
    assert len(train) == 12 and len(held_out) == 5 and load_records(spec) == train
    assert not {r["game_seed"] for r in train} & {r["game_seed"] for r in held_out}
    cls = load_environment("textarena:TicTacToe-v0")
    for row in train[:4] + held_out[:2]:  # the prompt is the opening the environment shows that seat
        assert row["prompt"] == [{"role": "user", "content": cls().reset(seed=0, game_seed=row["game_seed"])}]


@pytest.mark.parametrize("spec, needle", [
    ("textarena:TicTacToe", "did you mean 'TicTacToe-v0'"),
    ("textarena:Hangman-v0", "cannot be built here"),  # nltk's word list is a download
    ("textarena:Battleship-v0", "two-player game"),
    ("textarena:TicTacToe-v0?player=2", "option player=2; valid: 0 or 1"),
    ("textarena:GuessTheNumber-v0?player=1", "valid: 0 (a single-player game)"),
    ("textarena:TicTacToe-v0?level=9", "unknown option(s) ['level']"),
    ("reasoning_gym:chain_sum", "gives data rows, not an environment"),
])
def test_bad_game_specs_are_config_errors(spec, needle):
    with pytest.raises(ConfigError) as err:
        load_environment(spec)
    assert needle in str(err.value) and "rollout.multi_turn.environment" in str(err.value)


def test_a_missing_package_names_the_pip_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(ConfigError, match=r"pip install 'steadyrl\[textarena\]'"):
        load_environment("textarena:TicTacToe-v0")
