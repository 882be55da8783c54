"""TextArena games as environments (``rollout.multi_turn.environment: textarena:<GameId>``) and their starts
as data rows (``data.train_path: textarena:<GameId>``).

The policy plays one seat of the game; each of its turns is one ``step`` of the game. What it is
shown each turn is what the game told its seat since its last move (the game's messages as
``[GAME] ...``, an opponent's move as ``[Player 1] ...``); its own move is not repeated. At the end
the reward is the game's reward for its seat: 1 win, 0 draw, -1 loss (an invalid move, after the
game's one warning, loses), or a single-player game's own outcome.

**Opponent.** Two-player games are played against a fixed, seeded random opponent: it picks
uniformly among the legal moves, from a generator seeded by the row's ``game_seed``. Not
self-play, because (a) a group of samples of one prompt then faces the same opponent, so GRPO
compares the policy's moves and not the opponent's luck; (b) a held-out win rate against a fixed
opponent means the same thing at every evaluation, while a win rate against oneself is 50% by
construction; (c) self-play needs both seats of one game sampled as two trajectories with
opposite rewards, which the episode driver (one policy per episode) does not express. The
opponent needs legal moves, so two-player games are the ones in :data:`OPPONENTS`
(TicTacToe, ConnectFour and their variants); single-player games need none (GuessTheNumber,
Mastermind, Minesweeper, FrozenLake, TowerOfHanoi, ...). Games that download data on first use
(Hangman, Wordle: nltk's word lists) are refused at start-up when the data is not there.

**Seats and seeds.** A row's ``game_seed`` (rows from ``textarena:<GameId>``; else the episode's
seed) seeds the game and the opponent, and picks the policy's seat in a two-player game
(``game_seed % 2``: it moves first in half the games) unless the spec fixes ``player=0`` or ``1``.
"""

from __future__ import annotations

import random

from .options import TextArenaRows
from ..errors import ConfigError, DataError
from .spec import Spec, parse_spec, require, take

KEY = "rollout.multi_turn.environment"
HELD_OUT_OFFSET = 1_000_000_007
"""Held-out game seeds are the data seed plus this (training games use ``seed + i``)."""
GAME_ID = -1  # textarena's id of the game's own messages


def _tictactoe_moves(env) -> list[str]:
    board = env.state.game_state["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _connect_four_moves(env) -> list[str]:
    top = env.state.game_state["board"][0]
    return [f"[{c}]" for c in range(len(top)) if top[c] == "."]


OPPONENTS = {"TicTacToeEnv": _tictactoe_moves, "ConnectFourEnv": _connect_four_moves}
"""Two-player games (by their class) the seeded random opponent can play: its legal moves."""


def _unwrapped(env, ta):
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


def _players(env) -> int:
    """1 or 2: the seats the game takes (its state asserts the number it wants)."""
    for n in (1, 2):
        try:
            env.reset(num_players=n, seed=0)
            return n
        except AssertionError:
            continue
    raise ConfigError(f"the game {type(env).__name__} takes neither 1 nor 2 players; only 1- and 2-player games "
                      "are supported")


def make_game(game: str, where: str):
    """A fresh, unwrapped instance of ``game``; a ConfigError for an unknown or unplayable one."""
    ta = require("textarena", where)
    from textarena.envs.registration import ENV_REGISTRY

    if game not in ENV_REGISTRY:
        import difflib

        close = difflib.get_close_matches(game, list(ENV_REGISTRY), n=3)
        raise ConfigError(f"{where}: TextArena has no game {game!r}" +
                          (f"; did you mean {' or '.join(map(repr, close))}?" if close else
                           " (python -c 'import textarena; textarena.pprint_registry_detailed()' lists them)"))
    try:
        return _unwrapped(ta.make(game), ta)
    except Exception as err:  # noqa: BLE001 - a game that cannot be built here is a bad choice of game
        raise ConfigError(f"{where}: the game {game!r} cannot be built here ({type(err).__name__}: "
                          f"{str(err).strip()[:300]})") from None


def check_game(spec: Spec, where: str) -> dict:
    """The game's settings (players, seat, opponent) checked: an unknown game, one that needs a
    download, a two-player game without an opponent, or a bad option is a ConfigError."""
    options = dict(spec.options)
    player = options.pop("player", None)
    if options:
        raise ConfigError(f"{where}: unknown option(s) {sorted(options)}; valid: player (0 or 1)")
    env = make_game(spec.target, where)
    try:
        players = _players(env)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    except Exception as err:  # noqa: BLE001 - e.g. nltk's LookupError: the game downloads its data
        raise ConfigError(f"{where}: the game {spec.target!r} cannot start here ({type(err).__name__}: "
                          f"{str(err).strip()[:300]}); choose a game that ships its data") from None
    kind = type(env).__name__
    if players == 2 and kind not in OPPONENTS:
        raise ConfigError(f"{where}: {spec.target!r} is a two-player game ({kind}) without a built-in opponent; "
                          f"two-player games with one: {sorted(OPPONENTS)} (any TicTacToe / ConnectFour id), "
                          "or a single-player game")
    if player is not None and (players == 1 and player != 0 or player not in (0, 1) or isinstance(player, bool)):
        raise ConfigError(f"{where}: option player={player!r}; valid: " + ("0 (a single-player game)" if players == 1
                                                                           else "0 or 1"))
    return {"game": spec.target, "players": players, "player": player}


def _text(messages: list, me: int) -> str | None:
    lines = []
    for from_id, message, _kind in messages:
        if from_id == me:
            continue  # the policy's own move: already in the transcript
        lines.append(f"[GAME] {message}" if from_id == GAME_ID else f"[Player {from_id}] {message}")
    return "\n".join(lines) if lines else None


class TextArenaGame:
    """One episode of a TextArena game from one seat (module docstring); ``settings`` is set on a
    subclass per spec by :func:`environment_class`."""

    settings: dict = {}

    def reset(self, seed=None, game_seed=None, **row):
        game_seed = int(seed if game_seed is None else game_seed)
        self.env = make_game(self.settings["game"], KEY)
        players = self.settings["players"]
        self.env.reset(num_players=players, seed=game_seed)
        player = self.settings["player"]
        self.me = (game_seed % players) if player is None else player
        self.opponent = random.Random(game_seed)
        self.moves = OPPONENTS.get(type(self.env).__name__)
        done, _ = self._opponent_turns()
        if done:
            raise RuntimeError("the game ended before the policy's first move")
        return _text(self.env.get_observation()[1], self.me)

    def _opponent_turns(self) -> tuple[bool, dict]:
        done, info = False, {}
        while not done and self.env.state.current_player_id != self.me:
            done, info = self.env.step(self.opponent.choice(self.moves(self.env)))
        return done, info

    def step(self, text: str):
        done, _ = self.env.step(text)
        if not done:
            done, _ = self._opponent_turns()
        observation = _text(self.env.get_observation()[1], self.me) if not done else None
        if not done:
            return observation, None, False
        rewards, info = self.env.close()
        reason = (info or {}).get(self.me, {}).get("reason")
        return (f"[GAME] {reason}" if reason else None), float((rewards or {}).get(self.me, 0.0)), True


def environment_class(text: str) -> type:
    """The class for ``rollout.multi_turn.environment = 'textarena:<GameId>[?player=0]'``, its game checked."""
    spec = parse_spec(text, KEY)
    settings = check_game(spec, spec.where(KEY))
    return type(f"TextArena_{''.join(ch for ch in spec.target if ch.isalnum())}", (TextArenaGame,),
                {"settings": settings, "__module__": __name__})


def game_records(spec: Spec, split: str | None, key: str) -> list[dict]:
    """Rows for ``data.train_path: textarena:<GameId>[?seed=&size=&test_size=&player=]``: one game
    start per row (``game_seed``; train and held-out seeds disjoint), its prompt the game's first
    observation for the policy's seat (the environment's ``reset`` shows the same), so logs and
    length limits see what the policy sees."""
    where = spec.where(key)
    options = dict(spec.options)
    seed, size, test_size = (take(options, name, spec, key, TextArenaRows) for name in ("seed", "size", "test_size"))
    unknown = sorted(set(options) - {"player"})
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {unknown}; valid: seed, size, test_size, player")
    split = "train" if split is None else split
    if split not in ("train", "test"):
        raise DataError(f"{where}: split {split!r}; game rows have the splits ['train', 'test']")
    game = type("Rows", (TextArenaGame,), {"settings": check_game(Spec(spec.adapter, spec.target, options), where)})
    first, n = (seed, size) if split == "train" else (seed + HELD_OUT_OFFSET, test_size)
    rows = []
    for game_seed in range(first, first + n):
        opening = game().reset(game_seed=game_seed)
        rows.append({"prompt": [{"role": "user", "content": opening}], "game_seed": game_seed})
    return rows
