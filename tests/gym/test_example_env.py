"""The docs' example environment (``trace_gym/examples/loyalty_points.py``) is what
``docs/adding_an_environment.md`` promises: one module with one ``SPEC`` and nothing else, that
registers from a user folder with the registry row the docs show, and whose oracle scores 1.

(``tests/gym/test_validate.py`` runs every quick gate of ``trace-gym validate`` on it.)
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from trace_gym import CapabilitySpec
from trace_gym.core.env import TraceEnv
from trace_gym.examples import loyalty_points

DOCS = Path(__file__).parents[2] / "docs" / "adding_an_environment.md"


def test_the_example_is_one_module_with_one_spec_and_no_wiring() -> None:
    values = vars(loyalty_points).values()
    assert [v for v in values if isinstance(v, CapabilitySpec)] == [loyalty_points.SPEC]
    assert not [v for v in values if isinstance(v, type) and issubclass(v, TraceEnv)]
    tree = ast.parse(inspect.getsource(loyalty_points))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    # wiring the spec derives: a partial for verify_scoped, an oracle or generator wrapper
    assert "functools" not in names and "partial" not in names
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not defined & {"generate_task", "task_oracle", "verify_scoped"}


def _docs_registry_row() -> str:
    """The ``registry.yaml`` the docs tell a reader to write for the example."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    rows = [b for b in blocks if "loyalty_points:SPEC" in b]
    assert len(rows) == 1, "the docs show one registry.yaml for the example"
    return rows[0]


def test_the_example_registers_from_a_user_folder_and_its_oracle_scores_1(tmp_path) -> None:
    folder = tmp_path / "my_envs"
    folder.mkdir()
    shutil.copy(inspect.getsourcefile(loyalty_points), folder / "loyalty_points.py")
    (folder / "registry.yaml").write_text(_docs_registry_row())
    play = (
        "import json, gymnasium as gym, trace_gym\n"
        "assert 'trace/loyalty-points-v0' in trace_gym.registered_ids()\n"
        "env = gym.make('trace/loyalty-points-v0')\n"
        "rewards = []\n"
        "for seed in range(3):\n"
        "    env.reset(seed=seed)\n"
        "    for action in env.unwrapped.oracle_actions():\n"
        "        _, reward, terminated, truncated, info = env.step(action)\n"
        "        if terminated or truncated:\n"
        "            break\n"
        "    rewards.append([reward, info['is_success'], type(env.unwrapped).__module__])\n"
        "print(json.dumps(rewards))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", play],
        env={**os.environ, "TRACE_GYM_PATH": str(folder)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [[1.0, True, "loyalty_points"]] * 3
