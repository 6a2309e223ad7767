"""The vendored public data is the published data, and ingest reads gzip-compressed inputs."""

import gzip
import hashlib
import re

import pytest

from trace_diagnose.errors import IngestError
from trace_diagnose.ingest import detect_format, ingest

from .paths import DATA, FIXTURES, TAU2_REAL, TRACE_SELECTION


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_vendored_files_match_their_provenance():
    provenance = (DATA / "PROVENANCE.md").read_text()
    rows = re.findall(r"^\| (\S+) \| \S+ \| [0-9a-f]{40} \| ([0-9a-f]{40}) \|$", provenance, re.M)
    assert len(rows) == 13
    for name, blob in rows:
        assert git_blob_sha1((TRACE_SELECTION / name).read_bytes()) == blob, name
    raw = gzip.decompress(TAU2_REAL.read_bytes())
    assert git_blob_sha1(raw) == "d09a484020d9667ee90232299ddc10f8562e9dbf"
    assert "d09a484020d9667ee90232299ddc10f8562e9dbf" in provenance


def test_gzipped_inputs_read_like_the_plain_files(tmp_path):
    plain = tmp_path / "airline.json"
    plain.write_bytes(gzip.decompress(TAU2_REAL.read_bytes()))
    assert detect_format(TAU2_REAL) == [(TAU2_REAL, "tau2")]
    dump = lambda trajs: [t.model_dump(exclude={"source_path"}) for t in trajs]  # noqa: E731
    assert dump(ingest(TAU2_REAL)) == dump(ingest(plain))

    for fixture, kind in (("openai_chat.jsonl", "openai_jsonl"), ("episodes.jsonl", "trace_gym")):
        packed = tmp_path / "packed" / f"{fixture}.gz"
        packed.parent.mkdir(exist_ok=True)
        packed.write_bytes(gzip.compress((FIXTURES / fixture).read_bytes()))
        assert detect_format(packed) == [(packed, kind)]
        assert dump(ingest(packed)) == dump(ingest(FIXTURES / fixture))
    # A folder is searched for compressed files too.
    assert {kind for _, kind in detect_format(tmp_path / "packed")} == {"openai_jsonl", "trace_gym"}


@pytest.mark.parametrize("name", ["bad.json.gz", "bad.jsonl.gz"])
def test_a_corrupt_gzip_file_is_one_clear_error(tmp_path, name):
    bad = tmp_path / name
    bad.write_bytes(b"this is not gzip data")
    with pytest.raises(IngestError, match=f"{name}.*(gzip|cannot read)"):
        ingest(bad)
