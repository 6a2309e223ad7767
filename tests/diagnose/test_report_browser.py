"""The diagnosis report and the run report, rendered in headless Chromium.

A report is a file people open from disk or a CI artifact: it must render with no script and
no network (nothing to block, nothing to leak), with its tables and SVG charts in the page.
Skipped where Chromium is not installed; ``.ci/run`` installs it.
"""

from __future__ import annotations

import pytest

from trace_train.pipeline import PipelineConfig, run_pipeline

from ..browser import assert_self_contained, needs_chromium, render
from .planted import PLANTED


@pytest.fixture
def reports(tmp_path, stub, planted, monkeypatch):
    """``trace run`` on the planted trajectories: a run report and its diagnosis report."""
    monkeypatch.setenv("OPENAI_API_KEY", "stub")  # litellm's openai provider wants one
    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"),
        target="",
        trajectories=[str(planted)],
        train=False,
        llm="openai/stub",
        llm_api_base=stub.api_base,
        diagnose={"label_runs": 2},
    )
    run_report = run_pipeline(cfg, say=lambda _: None)
    return {"run": run_report, "diagnosis": tmp_path / "run" / "diagnose" / "report.html"}


@needs_chromium
def test_diagnosis_report_renders_self_contained(reports, tmp_path):
    page = reports["diagnosis"]
    rendered = render(page, tmp_path)
    assert_self_contained(page.read_text(), rendered)
    dom = rendered.dom
    for heading in ("Core capabilities", "Failure coverage", "All capabilities"):
        assert f"<h2>{heading}" in dom
    assert dom.count("<table") >= 3 and dom.count("<svg") >= 2
    assert 'aria-label="cumulative failure coverage"' in dom
    assert 'aria-label="mean delta and coverage per capability"' in dom
    assert "<polyline" in dom or "<path" in dom or "<line" in dom  # the curve is drawn
    assert PLANTED in dom


@needs_chromium
def test_run_report_renders_self_contained(reports, tmp_path):
    page = reports["run"]
    rendered = render(page, tmp_path)
    assert_self_contained(page.read_text(), rendered)
    dom = rendered.dom
    assert "<h2>Diagnosis" in dom and "<h2>Training environments" in dom
    assert dom.count("<table") >= 2 and PLANTED in dom


def test_self_containment_check_catches_scripts_and_remote_resources(tmp_path):
    """The checks themselves: each offending page must fail them (no browser needed)."""
    from ..browser import Rendered

    clean = Rendered("<html><body><svg></svg></body></html>", ["file:///r.html"])
    assert_self_contained("<html><body><svg></svg></body></html>", clean)
    for bad_html in (
        "<html><script>alert(1)</script></html>",
        '<html><img src="https://example.com/x.png"></html>',
        '<html><link rel="stylesheet" href="http://cdn.example.com/a.css"></html>',
        "<html><style>body{background:url(https://example.com/b.png)}</style></html>",
    ):
        with pytest.raises(AssertionError):
            assert_self_contained(bad_html, clean)
    with pytest.raises(AssertionError):
        assert_self_contained("<html></html>", Rendered("<html></html>", ["https://fonts.x/y"]))


@needs_chromium
def test_the_network_log_sees_a_page_that_loads_a_remote_image(tmp_path):
    page = tmp_path / "leaky.html"
    page.write_text('<!doctype html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    rendered = render(page, tmp_path)
    assert rendered.external == ["http://127.0.0.1:9/x.png"]
