"""Keep a long run's finished phases in the repository, so a session on a fresh machine resumes
it instead of starting over (``runs/`` is not committed).

    python benchmarks/run_snapshot.py save runs/fair_pilot benchmarks/phases/fair_pilot
    python benchmarks/run_snapshot.py restore benchmarks/phases/fair_pilot

``save`` copies the run folder without what a resume rebuilds or cannot keep: ``base_model/``
(the pipeline restores it from the stored warm start), GRPO checkpoints (a finished run needs
none) and the tokenizer copies in adapter folders. An unfinished GRPO run starts over on a
fresh machine, unless ``save --resume-point`` keeps its newest checkpoint (~22 MB: the adapter
and the optimizer state): then it resumes there, as on the machine that saved it.
Episode logs over 1 MB are stored gzipped.
``restore`` copies a snapshot back to the run folder its ``config.yaml`` names, refusing to
overwrite one that exists; rerunning the run's command then skips every finished stage and
resumes the rest.

    python benchmarks/run_snapshot.py save --resume-point runs/fair_cpu_r1 benchmarks/phases/fair_cpu_r1
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

import yaml

# copies of the base model's tokenizer (3.5 MB each) in adapter folders: without them an
# adapter is loaded with the base model's tokenizer, the same one, and an evaluation resumes
from trace_train.evaluate import TOKENIZER_FILES

GZIP_OVER_BYTES = 1_000_000
"""Episode logs (JSONL, ~22 KB an episode) over this size are stored gzipped (about 10x
smaller) and unpacked by ``restore``."""


def left_out(run_dir: Path, resume_point: bool = False) -> set[Path]:
    """What ``save`` leaves out of ``run_dir`` (relative to it): every GRPO run's checkpoints
    (train/<capability>/, plain-grpo/), except, with ``resume_point``, the newest checkpoint
    of a run that has not written its final adapter yet."""
    skip = {Path("base_model")}
    for folder in (c for c in run_dir.rglob("checkpoints") if c.is_dir()):
        newest = _newest_checkpoint(folder)
        unfinished = not (folder.parent / "adapter" / "adapter_model.safetensors").is_file()
        if resume_point and unfinished and newest is not None:
            skip |= {c.relative_to(run_dir) for c in folder.glob("checkpoint-*") if c != newest}
        else:
            skip.add(folder.relative_to(run_dir))
    skip |= {f.relative_to(run_dir) for name in TOKENIZER_FILES for f in run_dir.rglob(name)}
    return skip


def _newest_checkpoint(folder: Path) -> Path | None:
    steps = {int(c.name.rpartition("-")[2]): c for c in folder.glob("checkpoint-*")
             if c.is_dir() and c.name.rpartition("-")[2].isdigit()}  # fmt: skip
    return steps[max(steps)] if steps else None


def save(run_dir: Path, dest: Path, resume_point: bool = False) -> None:
    if not (run_dir / "stages.json").is_file():
        raise SystemExit(f"{run_dir}: not a run folder (no stages.json)")
    skip = left_out(run_dir, resume_point)
    if dest.exists():
        shutil.rmtree(dest)  # a snapshot is replaced whole: nothing stale survives in it
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir)
        if path.is_dir() or any(rel.is_relative_to(s) for s in skip):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".jsonl" and path.stat().st_size > GZIP_OVER_BYTES:
            # no name or time in the gzip header: an unchanged log packs to the same bytes,
            # so saving a later phase adds nothing to git for it
            with path.open("rb") as src, open(f"{dest / rel}.gz", "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                    shutil.copyfileobj(src, out)
        else:
            shutil.copy2(path, dest / rel)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"saved {run_dir} -> {dest} ({size / 1e6:.1f} MB; left out: "
          f"{', '.join(sorted(map(str, skip)))})")  # fmt: skip


def restore(snapshot: Path) -> Path:
    config = snapshot / "config.yaml"
    if not config.is_file():
        raise SystemExit(f"{snapshot}: not a run snapshot (no config.yaml)")
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    if run_dir.exists():
        raise SystemExit(f"{run_dir} exists: resume it as it is, or move it away first")
    shutil.copytree(snapshot, run_dir)
    for packed in run_dir.rglob("*.jsonl.gz"):
        with gzip.open(packed, "rb") as src, packed.with_suffix("").open("wb") as out:
            shutil.copyfileobj(src, out)
        packed.unlink()
    print(f"restored {snapshot} -> {run_dir}; rerun the run's command to resume it")
    return run_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save", help="copy a run folder's finished phases into the repository")
    s.add_argument("run_dir", type=Path)
    s.add_argument("dest", type=Path)
    s.add_argument("--resume-point", action="store_true",
                   help="keep the newest checkpoint of each unfinished GRPO run")  # fmt: skip
    r = sub.add_parser("restore", help="copy a snapshot back to its run folder")
    r.add_argument("snapshot", type=Path)
    args = ap.parse_args(argv)
    if args.command == "save":
        save(args.run_dir, args.dest, args.resume_point)
    else:
        restore(args.snapshot)


if __name__ == "__main__":
    main()
