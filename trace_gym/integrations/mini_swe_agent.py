"""mini-swe-agent as a client of ``trace/swe-repair-v0``.

`mini-swe-agent <https://mini-swe-agent.com>`_ (``pip install 'mini-swe-agent>=2.4'``) is a
bash-only agent harness: its model answers with one shell command per turn and submits with
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``. :class:`TraceSweEnvironment` is an
environment of theirs (their ``Environment`` protocol: ``execute``, ``get_template_vars``,
``serialize``) backed by a trace_gym repository environment:

* each command runs with ``bash -c`` in :mod:`trace_gym.sandbox`, in a fresh task directory
  holding the generated repository as the episode has it now; the files the command leaves
  (edited, created, deleted) become the repository for the next command. Whatever the
  command does once it started (fails, is not found, times out, exhausts a limit) is the
  agent's result, shown to it; only a sandbox that could not start is a harness
  ``infra_error``;
* the submit command submits the repository to the trace_gym episode, so the verdict is our
  verifier's (FAIL_TO_PASS and PASS_TO_PASS on hidden tests, gates, each check labelled with
  its capability); the episode's verification goes into the trajectory under
  ``info.trace_gym``, which ``trace_diagnose`` reads as the outcome and ground truth.

Isolation: bubblewrap (see :mod:`trace_gym.sandbox`: no capabilities, no network, its own
PID namespace, read-only system, only the task folder writable, caps on processes, memory
and disk). Without bubblewrap, constructing the environment raises
:class:`~trace_gym.sandbox.SandboxUnavailable` unless ``isolation="none"`` opts in to running
the agent's commands unisolated. ``info.trace_gym.isolation`` says which, and
``info.trace_gym.sandbox`` what the sandbox guarantees on that machine.

:func:`run_mini_swe_agent` plays one episode with their ``DefaultAgent`` and saves the
trajectory in their ``.traj.json`` format; :func:`export_episode` writes an episode played
through trace_gym's own tools in that same format. Importing this module does not import
``minisweagent`` (only running their agent does).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import platform
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_gym.envs.helpers.swe_common import SweEngine
from trace_gym.errors import ConfigError
from trace_gym.sandbox import Limits, Sandbox

ENV_ID = "trace/swe-repair-v0"
SUBMIT_COMMAND = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TRAJECTORY_FORMAT = "mini-swe-agent-1.1"
BASH = "/bin/bash"


@dataclass
class TraceSweEnvironmentConfig:
    env_id: str = ENV_ID
    seed: int = 0
    split: str | None = None
    """Task split (``train``/``val``/``test``); None keeps the environment's default."""
    difficulty: float | None = None
    timeout: int = 30
    """Wall-clock and CPU seconds per command."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of every command (mini-swe-agent's configs set PAGER=cat etc.)."""
    isolation: str | None = None
    """Sandbox isolation: ``bwrap`` (the default), or ``none`` to run the agent's commands
    without any isolation (an explicit opt-in: they can then read and write your files, use
    the network and leave processes running). None: ``TRACE_GYM_UNSAFE_NO_SANDBOX=1`` means
    ``none``, anything else ``bwrap``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``trace_gym.make``."""


class TraceSweEnvironment:
    """A mini-swe-agent environment whose shell is trace_gym's sandbox on a generated
    repository; see the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        import gymnasium as gym

        import trace_gym

        self.config = TraceSweEnvironmentConfig(**kwargs)
        cfg = self.config
        self.sandbox = Sandbox(
            Limits(
                cpu_seconds=cfg.timeout,
                wall_seconds=float(cfg.timeout),
                memory_bytes=2 << 30,
                open_files=256,
                processes=256,
                output_bytes=1 << 20,
            ),
            isolation=cfg.isolation,
            strict=False,
        )  # raises SandboxUnavailable (how to install bubblewrap, the opt-in) before anything
        if cfg.env_id in gym.registry:  # a trace_gym id, or one validate registered
            self.env = gym.make(cfg.env_id, **cfg.env_kwargs).unwrapped
        else:
            self.env = trace_gym.make(cfg.env_id, **cfg.env_kwargs).unwrapped  # says what exists
        if isinstance(self.env, SweEngine) and "isolation" not in cfg.env_kwargs:
            self.env.isolation = self.sandbox.isolation  # its verifier runs as the commands do
        options: dict[str, Any] = {}
        if cfg.split is not None:
            options["split"] = cfg.split
        if cfg.difficulty is not None:
            options["difficulty"] = cfg.difficulty
        _, info = self.env.reset(seed=cfg.seed, options=options)
        if "files" not in self.env.episode.world.tables or "submit" not in self.env.tools.names:
            raise ConfigError(
                f"{cfg.env_id}: mini-swe-agent needs a repository environment (a 'files' "
                f"table and a 'submit' tool), such as {ENV_ID}"
            )
        self.reset_info = {k: info[k] for k in _RESET_KEYS}
        self.commands = 0
        self.statuses: Counter[str] = Counter()
        self.infra_errors: list[str] = []
        self.submitted = False
        self.final: dict[str, Any] | None = None

    # -- the repository -------------------------------------------------------------------
    @property
    def task(self) -> str:
        """The issue, as the agent's task."""
        return str(self.env.episode.messages[1]["content"])

    def files(self) -> dict[str, str]:
        return {p: row["text"] for p, row in self.env.episode.world.tables["files"].items()}

    def _set_files(self, files: dict[str, str]) -> None:
        self.env.episode.world.tables["files"] = {
            p: {"path": p, "text": t} for p, t in sorted(files.items())
        }

    def diff(self) -> str:
        """The repository's changes as a unified diff (the run's submission)."""
        return repository_diff(self.env.task.files, self.files())

    # -- mini-swe-agent's Environment protocol --------------------------------------------
    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
        """Run ``action["command"]`` with bash in the sandbox, on the repository."""
        command = action.get("command", "") if isinstance(action, dict) else str(action)
        if self.submitted:
            return {"output": "", "returncode": 1,
                    "exception_info": "the repository has already been submitted"}  # fmt: skip
        if cwd and cwd not in (".", "/task"):
            command = f"cd {shlex.quote(cwd)} && {command}"
        sandbox = self.sandbox
        if timeout is not None and timeout != self.config.timeout:
            sandbox = Sandbox(
                dataclasses.replace(
                    sandbox.limits, cpu_seconds=int(timeout), wall_seconds=float(timeout)
                ),
                isolation=self.sandbox.isolation,
                strict=False,
            )
        run = sandbox.run_command(
            self.files(), [BASH, "-c", command], env=dict(self.config.env), collect=True,
            merge_stderr=True,
        )  # fmt: skip
        self.commands += 1
        self.statuses[run.status] += 1
        if run.infra_error:
            self.infra_errors.append(run.reason)
            return {"output": "", "returncode": -1,
                    "exception_info": f"the sandbox could not run the command: {run.reason}",
                    "extra": {"sandbox": run.summary()}}  # fmt: skip
        if run.files is not None:  # None: the run was cut short; the repository stays
            self._set_files(run.files)
        output = run.stdout + run.stderr
        failed = run.status not in ("ok", "error")
        out = {
            "output": output,
            "returncode": run.returncode if run.returncode is not None else -1,
            "exception_info": f"An error occurred while executing the command: {run.reason}"
            if failed
            else "",
            "extra": {"sandbox": run.summary()},
        }
        self._check_finished(out)
        return out

    def _check_finished(self, output: dict) -> None:
        lines = output.get("output", "").lstrip().splitlines()
        if not (lines and lines[0].strip() == SUBMIT_COMMAND and output["returncode"] == 0):
            return
        from minisweagent.exceptions import Submitted

        submission = self.diff()
        self.submit()
        raise Submitted(
            {
                "role": "exit",
                "content": submission,
                "extra": {"exit_status": "Submitted", "submission": submission},
            }
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**dataclasses.asdict(self.config), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "environment": json.loads(json.dumps(dataclasses.asdict(self.config))),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                },
                "trace_gym": self.record(),
            }
        }

    # -- the verdict ----------------------------------------------------------------------
    def submit(self) -> dict[str, Any]:
        """Submit the repository to the trace_gym episode (our verifier grades it)."""
        if not self.submitted:
            self.submitted = True
            _, reward, _, _, info = self.env.step({"name": "submit", "arguments": {}})
            self.final = {
                "final_reward": float(reward),
                "is_success": bool(info.get("is_success")),
                "end_reason": info.get("end_reason"),
                "verification": info.get("verification"),
                "infra_error": info.get("infra_error"),
            }
        return dict(self.final or {})

    def finish(self) -> None:
        """Record the verdict of a run that ended without submitting (it scores 0: only a
        submitted repository is graded, like an unsubmitted SWE-bench instance)."""
        if self.final is None:
            verification = self.env.verification()
            self.final = {
                "final_reward": verification.reward(self.env.reward_mode),
                "is_success": verification.passed,
                "end_reason": "not_submitted",
                "verification": verification.to_dict(),
                "infra_error": None,
            }

    def record(self) -> dict[str, Any]:
        """What ``info.trace_gym`` holds: the task, the isolation and the verification."""
        final = self.final or {}
        infra = final.get("infra_error") or (self.infra_errors[0] if self.infra_errors else None)
        return {
            **self.reset_info,
            "isolation": self.sandbox.isolation,
            "sandbox": self.sandbox.guarantees(),
            "played_with": "mini-swe-agent",
            "commands": self.commands,
            "command_statuses": dict(sorted(self.statuses.items())),
            "submitted": self.submitted,
            "end_reason": final.get("end_reason"),
            "final_reward": final.get("final_reward"),
            "is_success": final.get("is_success"),
            "infra_error": infra,
            "verification": final.get("verification"),
        }


_RESET_KEYS = ("env_id", "task_id", "task_seed", "split", "difficulty", "task_hash")


def repository_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """A ``git diff``-like unified diff between two repositories (path -> text)."""
    parts = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        lines = difflib.unified_diff(
            _lines(a),
            _lines(b),
            f"a/{path}" if a is not None else "/dev/null",
            f"b/{path}" if b is not None else "/dev/null",
        )
        parts.append(f"diff --git a/{path} b/{path}\n" + "".join(lines))
    return "".join(parts)


def _lines(text: str | None) -> list[str]:
    if not text:
        return []
    lines = text.splitlines(keepends=True)
    if not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def instance_id(task_id: str) -> str:
    """A file-name-safe instance id for a trace_gym task id."""
    return re.sub(r"[^\w.-]+", "__", task_id).strip("_")


def _mini_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mini-swe-agent")
    except PackageNotFoundError:
        return None


def _traj_path(output: str | Path, iid: str) -> Path:
    out = Path(output)
    return out if out.name.endswith(".traj.json") else out / f"{iid}.traj.json"


# -- running mini-swe-agent --------------------------------------------------------------------
def run_mini_swe_agent(
    env_id: str = ENV_ID,
    seed: int = 0,
    model: Any = None,
    *,
    output: str | Path = ".",
    config: str | Path | dict | None = None,
    step_limit: int = 40,
    split: str | None = None,
    difficulty: float | None = None,
    timeout: int = 30,
    isolation: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play one episode of ``env_id`` with mini-swe-agent's ``DefaultAgent``.

    Args:
        model: a mini-swe-agent model object (``DeterministicModel`` for a scripted run), or a
            model name for their ``get_model`` (LiteLLM; needs the provider's API key), or
            None for their configured default.
        output: a folder (the file is ``<instance id>.traj.json``) or a ``.traj.json`` path.
        config: a mini-swe-agent config (dict, YAML path or builtin name); default their
            ``default.yaml``. ``step_limit`` overrides its agent step limit.

    Returns ``{"instance_id", "path", "exit_status", "final_reward", "is_success",
    "verification", ...}`` (``info.trace_gym`` of the saved trajectory, plus the first three).
    """
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # their banner goes to stdout
    try:
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import get_config_from_spec
    except ImportError as exc:
        raise ConfigError(
            f"mini-swe-agent is not installed ({exc}); pip install 'mini-swe-agent>=2.4'"
        ) from None
    cfg = dict(config) if isinstance(config, dict) else get_config_from_spec(config or "default")
    agent_cfg = {**(cfg.get("agent") or {}), "step_limit": step_limit}
    agent_cfg.pop("mode", None)  # the interactive agent's option, not DefaultAgent's
    env_vars = {
        str(k): str(v) for k, v in ((cfg.get("environment") or {}).get("env") or {}).items()
    }
    if model is None or isinstance(model, str):
        from minisweagent.models import get_model

        model = get_model(model, cfg.get("model") or {})
    environment = TraceSweEnvironment(
        env_id=env_id, seed=seed, split=split, difficulty=difficulty, timeout=timeout,
        env=env_vars, isolation=isolation, env_kwargs=dict(env_kwargs or {}),
    )  # fmt: skip
    iid = instance_id(environment.reset_info["task_id"])
    path = _traj_path(output, iid)
    agent = DefaultAgent(model, environment, **agent_cfg, output_path=path)
    exit_info: dict[str, Any] = {}
    try:
        exit_info = agent.run(task=environment.task)
    finally:
        environment.finish()
        agent.save(path, {"instance_id": iid})
    return {
        "instance_id": iid,
        "path": str(path),
        "exit_status": exit_info.get("exit_status", ""),
        **environment.record(),
    }


# -- exporting trace_gym episodes --------------------------------------------------------------
_EXIT_STATUS = {"agent_end": "Submitted", "turn_limit": "LimitsExceeded"}


def export_episode(env: Any, output: str | Path = ".", *, agent: str = "unknown") -> Path:
    """Write a finished trace_gym episode (played through our own tools) as a mini-swe-agent
    ``.traj.json``: its messages in their tool-call form, an ``exit`` message with the
    repository diff as the submission, and the verification under ``info.trace_gym``."""
    base = env.unwrapped
    rec = base.episode_record(agent)  # raises on an unfinished episode
    iid = instance_id(rec["task_id"])
    messages: list[dict[str, Any]] = []
    for i, m in enumerate(rec["messages"]):
        role, content = m.get("role"), m.get("content") or ""
        if role == "tool":
            error = content.startswith('{"error"')
            messages.append({
                "role": "tool", "tool_call_id": m.get("tool_call_id"), "content": content,
                "extra": {"tool_name": m.get("name"), "returncode": int(error),
                          "exception_info": ""},
            })  # fmt: skip
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": content, "extra": {}}
            if m.get("tool_calls"):
                msg["tool_calls"] = m["tool_calls"]
            messages.append(msg)
        elif role == "system" and i > 0:  # the environment's notes: observations to the agent
            messages.append({"role": "user", "content": content,
                             "extra": {"interrupt_type": "environment"}})  # fmt: skip
        else:
            messages.append({"role": role, "content": content})
    tables = base.episode.world.tables
    task_files = getattr(base.task, "files", None)
    submission = ""
    if "files" in tables and isinstance(task_files, dict):
        submission = repository_diff(task_files, {p: r["text"] for p, r in tables["files"].items()})
    exit_status = _EXIT_STATUS.get(rec["end_reason"], rec["end_reason"] or "")
    messages.append({"role": "exit", "content": submission,
                     "extra": {"exit_status": exit_status, "submission": submission}})  # fmt: skip
    sandbox = getattr(base, "sandbox", None)
    trace = {
        **{k: rec[k] for k in _RESET_KEYS},
        "isolation": sandbox().isolation if callable(sandbox) else None,
        "played_with": "trace_gym tools",
        "submitted": rec["end_reason"] == "agent_end",
        "end_reason": rec["end_reason"],
        "final_reward": rec["final_reward"],
        "is_success": rec["is_success"],
        "infra_error": rec["end_reason"] if rec["end_reason"] == "infra_error" else None,
        "verification": rec["verification"],
    }
    data = {
        "info": {
            "model_stats": {"instance_cost": 0.0,
                            "api_calls": sum(m["role"] == "assistant" for m in messages)},
            "config": {"agent_type": "trace_gym", "model": {"model_name": agent},
                       "environment": {"env_id": rec["env_id"], **rec["env_kwargs"]},
                       "environment_type": type(base).__module__ + "." + type(base).__name__},
            "mini_version": _mini_version(),
            "exit_status": exit_status,
            "submission": submission,
            "trace_gym": trace,
        },
        "messages": messages,
        "trajectory_format": TRAJECTORY_FORMAT,
        "instance_id": iid,
    }  # fmt: skip
    path = _traj_path(output, iid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
