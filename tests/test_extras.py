"""Each pip extra the README and docs name installs what its feature needs, on its own.

`pip install -e ".[gguf]"` then `steadyrl convert` failed on a fresh machine ("accelerate is required
when loading a GGUF file"): the extra lacked accelerate, and `make test` passed only because the dev
extra pulls accelerate in through peft. Here each named extra's declared requirements, with the base
install's and everything they require in turn (read with importlib.metadata from this environment;
a requirement not installed here counts as itself only), must cover the distributions its feature
imports at run time (:data:`FEATURE_NEEDS`)."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent

FEATURE_NEEDS = {
    # extra -> distributions its feature imports at run time (directly or through transformers)
    "gguf": {"gguf": "steadyrl/convert.py reads the file", "accelerate": "transformers loads a GGUF only with it"},
    "peft": {"peft": "steadyrl/models.py: model.lora"},
    "tracking": {"tensorboard": "trackers: tensorboard", "wandb": "trackers: wandb", "mlflow": "trackers: mlflow",
                 "trackio": "trackers: trackio"},
    "reasoning-gym": {"reasoning-gym": "steadyrl/envs/spec.py ADAPTERS"},
    "textarena": {"textarena": "steadyrl/envs/spec.py ADAPTERS"},
    "openenv": {"openenv-core": "steadyrl/envs/spec.py ADAPTERS (openenv.core)"},
    "verifiers": {"verifiers": "docs/environments.md: verifiers environments"},
    "vllm": {"vllm": "rollout.engine = 'vllm'"},
    "vision": {"pillow": "images of prompts", "torchvision": "transformers' full Qwen-VL processors"},
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _named_extras() -> set[str]:
    """Extras the README and docs/*.md tell a user to install (`.[a,b]`, `steadyrl[a]`)."""
    named = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for group in re.findall(r"(?:steadyrl|\.)\[([a-z0-9,\- ]+)\]", page.read_text()):
            named |= {x.strip() for x in group.split(",") if x.strip()}
    return named


def _closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` install: themselves and (installed here) what they require,
    with the extras each requirement asks for, markers read for this platform."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.requires(req.name) or []
        except md.PackageNotFoundError:
            continue
        for wanted in ("", *sorted(req.extras)):
            todo += [(Requirement(r), wanted) for r in requires]
    return {k.split("[")[0] for k in seen}


def test_every_extra_the_docs_name_exists_and_states_what_its_feature_needs():
    extras = _pyproject()["project"]["optional-dependencies"]
    named = _named_extras()
    assert {"gguf", "peft", "tracking", "reasoning-gym"} <= named  # the README's own
    assert named <= set(extras), f"the docs name extras pyproject.toml lacks: {sorted(named - set(extras))}"
    assert named <= set(FEATURE_NEEDS), f"say what these extras' features import: {sorted(named - set(FEATURE_NEEDS))}"


def test_each_named_extra_alone_covers_the_imports_of_its_feature():
    project = _pyproject()["project"]
    missing = {}
    for extra in sorted(_named_extras()):
        installed = _closure(project["dependencies"] + project["optional-dependencies"][extra])
        lacking = {d: why for d, why in FEATURE_NEEDS[extra].items() if canonicalize_name(d) not in installed}
        if lacking:
            missing[extra] = lacking
    assert not missing, f"extras that do not install what their feature imports: {missing}"


def test_the_closure_follows_requirements_and_their_extras_not_everything():
    base = _closure(["transformers>=4.46"])
    assert "tokenizers" in base and "accelerate" not in base  # transformers' accelerate is behind its extras
    assert "accelerate" in _closure(["transformers[torch]>=4.46"])
