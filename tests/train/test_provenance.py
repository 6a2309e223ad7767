"""trace_train.provenance: git state, file and model hashes."""

from __future__ import annotations

import hashlib
import subprocess

from trace_train import provenance


def test_git_state_names_the_commit_and_the_changed_files(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = provenance.git_state(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")  # " M a.py": a leading space in porcelain
    dirty = provenance.git_state(tmp_path)
    assert dirty["dirty"] is True and dirty["changed"] == ["a.py"]
    outside = provenance.git_state(tmp_path / "a.py")
    assert outside["commit"] is None and "no git checkout" in outside["why"]


def test_model_hash_covers_weight_files_only(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "tokenizer.json").write_text("{}")
    record = provenance.model_hash(tmp_path)
    assert record["files"] == {"model.safetensors": hashlib.sha256(b"weights").hexdigest()}
    (tmp_path / "tokenizer.json").write_text('{"changed": 1}')
    assert provenance.model_hash(tmp_path)["sha256"] == record["sha256"]
    assert provenance.model_hash("org/name")["sha256"] is None
