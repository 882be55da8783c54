"""Draw docs/images/dashboard_example.png: the dashboard of a synthetic GRPO run.

    python tools/gen_dashboard_example.py

The metrics come from the test suite's synthetic run (``tests/tracking/conftest.py``), with the
evaluation a run does by default (``trainer.eval_every`` 0): once before training (step 0) and once
after. The PNG is reduced to a 256-colour palette to keep the repository small.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from PIL import Image  # noqa: E402

from steadyrl.plot import plot_run  # noqa: E402

OUT = REPO / "docs" / "images" / "dashboard_example.png"
STEPS = 200


def synthetic_run(run_dir: Path) -> Path:
    spec = importlib.util.spec_from_file_location("synthetic", REPO / "tests" / "tracking" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_synthetic_run(run_dir, steps=STEPS)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]]  # no crash
    evals = [{k: row.pop(k) for k in list(row) if k.startswith("eval/")} for row in rows]
    before = {"eval/accuracy": 0.27, "eval/pass@1": 0.26, "eval/pass@4": 0.52, "eval/reward_mean": 0.41}
    after = {k.replace("pass@k", "pass@4"): v for k, v in evals[STEPS - 1].items()}
    after.update({"eval/pass@1": after["eval/accuracy"] - 0.02, "eval/reward_mean": 0.8 * after["eval/accuracy"] + 0.19})
    rows[-1].update(after)
    rows.insert(0, {"step": 0, **before})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "tracking.json").write_text(json.dumps({"run_name": "example-grpo (synthetic metrics)"}))
    return run_dir


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_run(synthetic_run(Path(tmp) / "example-grpo"), Path(tmp) / "dashboard.png")
        Image.open(png).convert("RGB").quantize(256).save(OUT, optimize=True)
    print(f"{OUT.relative_to(REPO)}: {OUT.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
