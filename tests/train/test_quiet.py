"""Loading a model through trace_train prints nothing: no library warnings, no loading bars."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from trace_train.policies import load_hf
from trace_train.rollout import hf_generate
model, tok = load_hf(sys.argv[1])
ids = tok("Check the order", add_special_tokens=False)["input_ids"]
for reuse in (True, False):
    hf_generate(model, tok, [-1], temperature=0.0, reuse_cache=reuse)([ids, ids[:2]], 3)
print("ok")
"""


def test_loading_and_generating_print_nothing_to_stderr(tiny_model_dir):
    # A fresh interpreter, default warning filters: what a user's console shows.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, tiny_model_dir],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert done.stderr == "", done.stderr


def test_quiet_silences_library_chatter_and_restores_settings():
    import logging

    from transformers.utils import logging as hf_logging

    from trace_train.quiet import quiet

    level = logging.getLogger("transformers").level
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            warnings.warn("`x` is deprecated", FutureWarning, stacklevel=1)
            assert not hf_logging.is_progress_bar_enabled()
            assert logging.getLogger("transformers").level == logging.ERROR
        warnings.warn("ours, after the block", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["ours, after the block"]
    assert hf_logging.is_progress_bar_enabled()
    assert logging.getLogger("transformers").level == level


WARMSTART = """
import sys
from trace_train.config import WarmstartConfig
from trace_train.warmstart import train
train(WarmstartConfig(model=sys.argv[1], output_dir=sys.argv[2], demonstrations=2, epochs=1,
                      batch_size=2, eval_episodes=0, max_turns=6, max_new_tokens=8,
                      max_completion_tokens=200))
"""


def test_training_shows_its_step_bar_and_nothing_else(tmp_path, tmp_path_factory):
    """No dataset-preparation bars, no metrics dictionary printed at every step: one bar."""
    from tests.train.envtiny import build_env_tiny

    model = build_env_tiny(tmp_path_factory.getbasetemp())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", WARMSTART, model, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert "1/1" in console  # the trainer's step bar
    for chatter in ("Building labels", "Truncating", "'loss'", "train_runtime", "Warning"):
        assert chatter not in console, console
