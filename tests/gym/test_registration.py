"""The registry loader: files that list only ``id: module:SPEC``, rows built from the specs,
user folders on TRACE_GYM_PATH, and a clear error for each way a registry can be wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import trace_gym
from trace_gym.errors import RegistryError, UnknownEnvError
from trace_gym.registration import (
    PACKAGE_REGISTRY,
    REGISTRY_VERSION,
    USER_PATH_VARIABLE,
    entry,
    listings,
    load_registry,
    read_registry_file,
    registered_ids,
)

REPO = Path(__file__).resolve().parents[2]

# A spec module for user folders: the reference example spec under another id and capability.
SPEC_MODULE = """
import dataclasses
from trace_gym.examples import loyalty_points
SPEC = dataclasses.replace(
    loyalty_points.SPEC, id="{env_id}", capability="{capability}", tags=("{capability}",)
)
"""


def write_folder(folder: Path, module: str, env_id: str, capability: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(SPEC_MODULE.format(env_id=env_id, capability=capability))
    (folder / "registry.yaml").write_text(
        f"version: {REGISTRY_VERSION}\nenvironments:\n  {env_id}: {module}:SPEC\n"
    )
    return folder


def write_registry(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_the_package_registry_lists_only_ids_and_entry_points():
    data = yaml.safe_load(PACKAGE_REGISTRY.read_text())
    assert set(data) == {"version", "environments"} and data["version"] == REGISTRY_VERSION
    assert all(isinstance(v, str) and v.endswith(":SPEC") for v in data["environments"].values())
    assert registered_ids() == list(data["environments"])


def test_rows_come_from_the_specs():
    rows = {row.id: row for row in load_registry()}
    precondition = rows["trace/precondition-v0"]
    from trace_gym.envs.precondition import SPEC

    assert precondition.spec is SPEC
    assert precondition.capability == SPEC.capability == "precondition_verification"
    assert precondition.tags == SPEC.tags and precondition.max_turns == SPEC.max_turns
    assert precondition.registry == PACKAGE_REGISTRY and precondition.user_folder is None
    assert entry("trace/precondition-v0") == precondition


def test_an_unknown_id_suggests_close_ones():
    with pytest.raises(UnknownEnvError, match="Did you mean trace/precondition-v0"):
        entry("trace/precondtion-v0")


def test_import_registers_every_id_without_importing_an_environment_module():
    code = (
        "import json, sys, gymnasium as gym, trace_gym\n"
        "print(json.dumps([all(i in gym.registry for i in trace_gym.registered_ids()),\n"
        "                  sorted(m for m in sys.modules if m.startswith('trace_gym.envs.'))]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(USER_PATH_VARIABLE, None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [True, []]


def test_a_user_folder_adds_its_rows_after_the_package_s(tmp_path, monkeypatch):
    folder = write_folder(tmp_path / "mine", "reg_test_points", "trace/points-a-v0", "points_a")
    monkeypatch.setenv(USER_PATH_VARIABLE, str(folder))
    rows = load_registry()
    assert rows[-1].id == "trace/points-a-v0" and rows[-1].user_folder == folder
    assert rows[-1].capability == "points_a" and rows[-1].tags == ("points_a",)
    assert [r.id for r in rows[:-1]] == list(
        yaml.safe_load(PACKAGE_REGISTRY.read_text())["environments"]
    )
    # an explicit registry file is read alone
    assert [r.id for r in load_registry(folder / "registry.yaml")] == ["trace/points-a-v0"]
    try:
        assert trace_gym.register_envs() == [r.id for r in rows]
        env = trace_gym.make("trace/points-a-v0")
        assert env.unwrapped.capability_spec.capability == "points_a"
        env.close()
    finally:  # other tests see only the shipped ids
        gym.registry.pop("trace/points-a-v0", None)


def test_an_id_in_two_registries_names_both(tmp_path, monkeypatch):
    one = write_folder(tmp_path / "one", "reg_test_twice_a", "trace/twice-v0", "twice")
    two = write_folder(tmp_path / "two", "reg_test_twice_b", "trace/twice-v0", "twice")
    monkeypatch.setenv(USER_PATH_VARIABLE, os.pathsep.join([str(one), str(two)]))
    with pytest.raises(RegistryError, match=r"two/registry\.yaml: id 'trace/twice-v0' is already"):
        listings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            """
            version: 1
            environments:
              - id: trace/old-v0
                entry_point: old:SPEC
            """,
            "is a list of rows \\(registry version 1\\); since version 2 it maps each id",
        ),
        ("version: 3\nenvironments: {}\n", "registry version 3; this trace_gym reads version 2"),
        ("environments: 3\n", "expected a top-level 'environments' mapping"),
        ("environments:\n  trace/a-v0: no_colon\n", "entry point must be 'module:SPEC'"),
        ("environments:\n  trace/a-v0: [a, b]\n", "expected 'id: module:SPEC' strings"),
        (
            "environments:\n  trace/a-v0: a:SPEC\n  trace/a-v0: b:SPEC\n",
            "'trace/a-v0' is listed twice",
        ),
        ("environments: {unclosed\n", "cannot read environment registry"),
    ],
)
def test_a_malformed_registry_file_is_a_clear_error(tmp_path, text, message):
    path = write_registry(tmp_path / "registry.yaml", text)
    with pytest.raises(RegistryError, match=message) as info:
        read_registry_file(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("reg_test_missing_module:SPEC", "cannot import 'reg_test_missing_module'"),
        ("trace_gym.envs.precondition:NOPE", "has no 'NOPE'"),
        ("trace_gym.envs.precondition:ENV_ID", "is a str, not a CapabilitySpec"),
        ("trace_gym.envs.clarify:SPEC", "is the spec of 'trace/clarify-v0'"),
    ],
)
def test_an_entry_point_that_is_not_this_id_s_spec_is_a_clear_error(tmp_path, entry_point, message):
    path = write_registry(
        tmp_path / "registry.yaml", f"environments:\n  trace/precondition-v0: {entry_point}\n"
    )
    with pytest.raises(RegistryError, match=message) as info:
        load_registry(path)
    assert "trace/precondition-v0" in str(info.value) and str(path) in str(info.value)


def test_a_user_folder_without_a_registry_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(USER_PATH_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(RegistryError, match=r"TRACE_GYM_PATH folder .*missing has no registry"):
        registered_ids()


def test_a_user_module_may_not_shadow_an_installed_one(tmp_path, monkeypatch):
    folder = write_folder(tmp_path / "shadow", "yaml", "trace/shadow-v0", "shadow")
    monkeypatch.setenv(USER_PATH_VARIABLE, str(folder))
    with pytest.raises(RegistryError, match="module name 'yaml' is taken by"):
        registered_ids()


def test_a_user_entry_point_outside_its_folder_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    write_registry(
        folder / "registry.yaml", "environments:\n  trace/x-v0: trace_gym.envs.precondition:SPEC\n"
    )
    monkeypatch.setenv(USER_PATH_VARIABLE, str(folder))
    with pytest.raises(RegistryError, match="module 'trace_gym.envs.precondition' is not in"):
        registered_ids()


def test_a_spec_module_that_loads_the_registry_while_importing_is_named(tmp_path, monkeypatch):
    folder = tmp_path / "cyclic"
    folder.mkdir()
    (folder / "reg_test_cyclic.py").write_text(
        "from trace_gym.registration import load_registry\nROWS = load_registry()\nSPEC = None\n"
    )
    write_registry(
        folder / "registry.yaml", "environments:\n  trace/cyclic-v0: reg_test_cyclic:SPEC\n"
    )
    monkeypatch.setenv(USER_PATH_VARIABLE, str(folder))
    with pytest.raises(RegistryError, match="has no 'SPEC' yet: it is still being imported"):
        load_registry()
