"""The driver of ``trace run``: every stage of ``stages.STAGES`` in order, resumably.

A finished stage (``done`` in ``stages.json``) is skipped, so a rerun of the same command
resumes where it stopped (GRPO from its last checkpoint, the diagnoser from its SQLite
cache, evaluation policy by policy and batch by batch); ``redo`` runs a finished stage again
with the ones after it. With ``train: false`` the training stages are skipped.

Under ``accelerate launch --num_processes N`` every process runs this driver: the main process
runs every stage as above, the stages that run TRL trainers (``Stage.all_processes``: the warm
start and GRPO) with the others, which wait, reading ``stages.json``, while the main process
runs the stages before them, and stop after the last of them. Waiting on the file rather than
in a collective barrier keeps an hour of diagnosis from running into the process group's
timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from trace_train import distributed
from trace_train.pipeline import clock, stages
from trace_train.pipeline.config import PipelineConfig, PipelineError
from trace_train.pipeline.run_folder import Run

CLOCK_FILE = "stage-clock.json"  # the running stage's time so far (pipeline.clock)


def run_pipeline(
    config: PipelineConfig,
    say: stages.Say = print,
    redo: str | None = None,
    until: str | None = None,
) -> Path | None:
    """Run (or resume) every stage; return the path of the final HTML report (``None`` in the
    helper processes of ``accelerate launch``, which stop after training, and when ``until``
    stops the run early).

    ``redo`` names a finished stage to run again, with every stage after it (e.g. ``evaluate``
    after raising ``evaluate.episodes``). Training resumes from its checkpoints, so a redone
    ``train`` continues to a larger ``grpo.steps`` rather than starting over. ``until`` names
    the last stage to run: e.g. ``compose`` trains and composes now, and a later rerun without
    it evaluates (a pre-registered comparison's arms train before its plan fixes the test)."""
    table = stages.STAGES  # read at call time: tests swap in stage tables
    names = [stage.name for stage in table]
    for flag, name in (("--redo", redo), ("--until", until)):
        if name is not None and name not in names:
            raise PipelineError(f"{flag} {name!r}: not a stage; stages are {', '.join(names)}")
    if config.trajectories and config.train and not config.target:
        raise PipelineError("training needs a trace_gym target to evaluate on; set train: false")
    if not distributed.is_main():
        _help_train(config, table, until)
        return None
    run = Run(config)
    saved = run.path("config.yaml")
    if saved.exists() and redo is None:
        previous = yaml.safe_load(saved.read_text()) or {}
        if previous != config.as_dict():
            say(
                f"note: {saved} differs from this config; finished stages keep their results "
                "(--redo STAGE runs one again, with the stages after it)"
            )
    if redo is not None:
        again = names[names.index(redo) :]
        run.forget(again)
        clock.forget(run.path(CLOCK_FILE), again)
        if "evaluate" in again:  # the adapters may have changed: no saved evaluation stands
            for summary in run.path("evaluate").glob("*/summary.json"):
                summary.unlink()
        say(f"redo: {', '.join(again)}")
    saved.write_text(yaml.safe_dump(config.as_dict(), sort_keys=False))
    distributed.barrier()  # helper processes read stages.json only after the redo is recorded
    stages.use_environments(run.environments)  # synthesised by an earlier, interrupted run
    stages.restore_base_model(run, say)  # a run folder resumed on a fresh clone lacks it
    for i, stage in enumerate(table, 1):
        if stage.trains and not config.train:
            pass
        elif run.done(stage.name):
            say(f"[{i}/{len(table)}] {stage.name}: done earlier, skipped")
        else:
            _run_stage(run, stage, say, f"[{i}/{len(table)}]")
        if stage.name == until:
            say(f"stopped after {until} (--until); rerun without it to go on")
            return None
    from trace_train.pipeline.report import closing_summary

    for line in closing_summary(run):
        say(line)
    return Path(run.output("report")["html"])


def _run_stage(run: Run, stage: stages.Stage, say: stages.Say, number: str) -> None:
    if stage.all_processes:
        distributed.barrier()  # the helper processes join this stage
    say(f"{number} {stage.name} ...")
    run.mark(stage.name, "started")
    # every invocation's time, not only this one's: a stage resumed after a kill cost all of it
    with clock.StageClock(run.path(CLOCK_FILE), stage.name) as stage_clock:
        output = stage.fn(run, say)
    run.mark(stage.name, "done", output, **stage_clock.total())
    clock.forget(run.path(CLOCK_FILE), [stage.name])


def _help_train(
    config: PipelineConfig, table: tuple[stages.Stage, ...], until: str | None = None
) -> None:
    """A helper process of ``accelerate launch``: wait for the main process to finish each stage
    it runs alone, run the stages every process runs, stop after the last of them."""
    distributed.barrier()  # the main process has recorded a redo in stages.json
    run = Run(config)
    stages.use_environments(run.environments)
    stages.restore_base_model(run, lambda _: None)  # meets the main process's barrier in it
    shared = [i for i, s in enumerate(table) if s.all_processes and (config.train or not s.trains)]
    for stage in table[: max(shared, default=-1) + 1]:
        if stage.trains and not config.train:
            pass
        elif not stage.all_processes:
            _wait_until_done(config, stage.name)
            stages.use_environments(run.environments)  # synthesize may have written some
        elif not Run(config).done(stage.name):
            distributed.barrier()
            stage.fn(Run(config), lambda _: None)  # the main process reports progress
        if stage.name == until:
            return  # the main process stops here too


def _wait_until_done(config: PipelineConfig, stage: str, poll_s: float = 2.0) -> None:
    """Until the main process records ``stage`` as done (``accelerate launch`` ends every
    process if the main one fails, so this does not outlive it)."""
    while not Run(config).done(stage):
        time.sleep(poll_s)
