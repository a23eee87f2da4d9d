"""`python -m gpuqueue.sim`: what a user of the command line gets (the replay's summary and
results file, the comparison's table and plots) and what a mistake gets (one line, exit 2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuqueue.sim.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
TINY = str(FIXTURES / "philly_tiny.csv")


def test_replay_prints_a_summary_and_writes_the_results_with_the_options_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    args = ["replay", "--trace", TINY, "--cluster", "2x8", "--policy", "fifo", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)  # one line of JSON
    assert summary["policy"] == "fifo" and summary["jobs"] == 4 and summary["gpus"] == 16
    doc = json.loads(out.read_text())
    assert doc["summary"]["jobs_finished"] == summary["jobs_finished"] == 4
    assert doc["config"]["policy"] == "fifo" and doc["config"]["cluster"] == "2x8"
    # Only the options: two runs of the same command write the same options.
    assert all(isinstance(v, (str, int, float, bool, type(None))) for v in doc["config"].values())
    assert {"series", "teams", "anomalies"} <= set(doc)


def test_compare_writes_a_table_a_plot_and_the_results_per_cluster_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "--trace", TINY, "--clusters", "2x8,4x8", "--policies", "gpuqueue,fifo"]
    assert main([*args, "--out-dir", str(tmp_path), "--quiet"]) == 0
    table = (tmp_path / "compare.md").read_text()
    assert table.strip() in capsys.readouterr().out  # printed too
    rows = [line for line in table.splitlines() if line.startswith("| gpuqueue")]
    assert len(rows) == 2  # one per cluster size
    for gpus in (16, 32):
        assert (tmp_path / f"gpus-{gpus}.png").read_bytes().startswith(b"\x89PNG")
        results = json.loads((tmp_path / f"gpus-{gpus}.json").read_text())
        assert [r["policy"] for r in results] == ["gpuqueue", "fifo"]


def test_compare_without_matplotlib_writes_its_table_and_says_how_to_get_the_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `pip install .` leaves out
    args = ["compare", "--trace", TINY, "--clusters", "2x8", "--policies", "gpuqueue,fifo"]
    assert main([*args, "--out-dir", str(tmp_path), "--quiet"]) == 0
    assert "| gpuqueue" in (tmp_path / "compare.md").read_text()
    assert json.loads((tmp_path / "gpus-16.json").read_text())
    assert not (tmp_path / "gpus-16.png").exists()
    assert "pip install 'gpuqueue[plots]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "No such file"),
        ("a,b\n1,2\n", [], "not a Philly jobs CSV: no column timestamp"),
        (
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,soon,1,1,x\n",
            ["--cluster", "1x8"],
            "line 2: could not convert string to float: 'soon'",
        ),
        (
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,60,1,60,x\n",
            [],
            "give --cluster",  # one instant: no offered load to size a cluster for
        ),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n", ["--cluster", "1x8"], "no jobs"),
        (
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,60,1,60,x\n",
            ["--cluster", "8 nodes"],
            "expected [FLAVOR=]NODESxGPUS",
        ),
    ],
)
def test_a_bad_trace_or_option_gets_one_line_and_exit_status_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    args: list[str],
    message: str,
) -> None:
    trace = tmp_path / "trace.csv"
    if content is not None:
        trace.write_text(content)
    out = tmp_path / "results.json"
    status = main(["replay", "--trace", str(trace), "--quiet", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not out.exists()
