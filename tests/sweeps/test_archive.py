"""``per-dqn archive`` and ``unarchive``: a real tiny sweep kept in one file and rebuilt from it,
its report written again byte for byte and its command finding every run finished; bad input
in one line."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import assert_bad_input, tiny_args
from test_report import fake_run
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.logs import metrics, tags
from per_dqn.sweeps import archive, events, runs
from per_dqn.sweeps.archive import ARCHIVED_TAGS

runner = CliRunner()
REPORT_FILES = ("report.md", "scores.csv", "curves.svg", "profiles.svg")


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """The tiny sweep: 2 arms x 2 seeds x 600 steps, through the CLI."""
    out = tmp_path_factory.mktemp("archive") / "sweep"
    result = runner.invoke(app, tiny_args(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_a_sweep_rebuilt_from_its_archive_reports_the_same_and_counts_its_runs_finished(
    swept, tmp_path
):
    original = tmp_path / "original"
    shutil.copytree(swept, original)
    file = tmp_path / "study.tar.xz"
    result = runner.invoke(app, ["archive", str(original), str(file)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"archive: {file} (4 runs, ")
    # the same runs give the same bytes
    again = tmp_path / "again.tar.xz"
    assert runner.invoke(app, ["archive", str(original), str(again)]).exit_code == 0
    assert again.read_bytes() == file.read_bytes()
    with tarfile.open(file) as tar:
        names = set(tar.getnames())
    assert "sweep.json" in names and "uniform/s0/scalars.csv" in names
    assert not any(n.endswith((".pt", ".lock")) or "checkpoints" in n for n in names)

    rebuilt = tmp_path / "rebuilt"
    result = runner.invoke(app, ["unarchive", str(file), str(rebuilt)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"unarchive: {rebuilt} (4 runs)\n"
    for rel in ("uniform/s0", "proportional/s1"):
        for name in ("config.yaml", "summary.json", "run.json"):
            assert (rebuilt / rel / name).read_bytes() == (original / rel / name).read_bytes()
        assert runs.read_curves(rebuilt / rel, archive.ARCHIVED_TAGS) == runs.read_curves(
            original / rel, archive.ARCHIVED_TAGS
        )
        assert not (rebuilt / rel / "model.pt").exists()
    for sweep_dir in (original, rebuilt):
        assert runner.invoke(app, ["report", str(sweep_dir)]).exit_code == 0
    for name in REPORT_FILES:
        assert (rebuilt / name).read_bytes() == (original / name).read_bytes(), name
    # the sweep's command finds every run finished there, and grows it with the runs it lacks
    args = tiny_args(rebuilt, workers=1)
    assert "4 runs, 4 finished, 0 to run\n" in runner.invoke(app, args).stdout
    args[args.index("--seeds") + 1] = "3"
    grown = runner.invoke(app, args)
    assert grown.exit_code == 0, grown.output
    assert "6 runs, 4 finished, 2 to run\n  on 1 worker\n" in grown.stdout
    assert runs.is_finished(rebuilt / "uniform/s2")


@pytest.mark.slow
def test_only_finished_runs_are_archived(swept, tmp_path):
    out = tmp_path / "sweep"
    shutil.copytree(swept, out)
    (out / "uniform/s1/summary.json").unlink()  # a run killed before its summary
    file = tmp_path / "a.tar.xz"
    assert archive.write_archive(out, file) == 3
    with tarfile.open(file) as tar:
        assert not any(n.startswith("uniform/s1/") for n in tar.getnames())


def _tar(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return path


def test_bad_archive_commands_are_one_line_and_leave_nothing(workdir):
    (workdir / "empty").mkdir()
    (workdir / "full").mkdir()
    (workdir / "full" / "keep.txt").write_text("mine")
    scalars = b"tag,step,value\neval/return_mean,100,1.0\n"
    _tar(workdir / "escape.tar.xz", {"../evil/scalars.csv": scalars})
    _tar(workdir / "link.tar.xz", {"r/scalars.csv": scalars}, link="r/summary.json")
    _tar(workdir / "norun.tar.xz", {"sweep.json": b"{}"})
    run = {"r/config.yaml": b"env: {}\n", "r/summary.json": b"{}"}
    _tar(
        workdir / "badrow.tar.xz",
        {**run, "r/scalars.csv": b"tag,step,value\neval/return_mean,x,1\n"},
    )
    _tar(workdir / "badtag.tar.xz", {**run, "r/scalars.csv": b"tag,step,value\nloss,1,1\n"})
    # Pins a bug: a step past int64 reached protobuf, whose "Value out of range" named no file.
    huge = b"tag,step,value\neval/return_mean,9223372036854775808,1\n"
    _tar(workdir / "bigstep.tar.xz", {**run, "r/scalars.csv": huge})
    _tar(workdir / "negstep.tar.xz", {**run, "r/scalars.csv": huge.replace(b"9223", b"-1")})
    _tar(workdir / "both.tar.xz", {"r": b"", "r/scalars.csv": scalars})
    _tar(workdir / "bare.tar.xz", {"r/scalars.csv": scalars})
    _tar(workdir / "latin.tar.xz", {**run, "r/scalars.csv": b"tag,step,value\n\xff\n"})
    (workdir / "junk.tar.xz").write_bytes(b"not an archive")
    cases = [
        (["archive", "nope", "a.tar.xz"], "nope: no such sweep dir"),
        (["archive", "empty", "a.zip"], "a.zip: the archive's name must end in .tar.xz"),
        (["archive", "empty", "empty/a.tar.xz"],
         "empty/a.tar.xz: the archive cannot go inside the sweep dir empty"),
        (["archive", "empty", "a.tar.xz"], "empty: holds no finished run to archive"),
        (["archive", "empty", "nodir/a.tar.xz"], "nodir/a.tar.xz: no such directory nodir"),
        (["unarchive", "missing.tar.xz", "new"], "missing.tar.xz: no such file"),
        (["unarchive", "escape.tar.xz", "full"],
         "full: exists and is not empty; choose a new dir to unarchive into"),
        (["unarchive", "escape.tar.xz", "new"],
         "escape.tar.xz: member '../evil/scalars.csv' would leave the sweep dir"),
        (["unarchive", "link.tar.xz", "new"],
         "link.tar.xz: member 'r/summary.json' is not a regular file"),
        (["unarchive", "norun.tar.xz", "new"], "norun.tar.xz: holds no run (no scalars.csv)"),
        (["unarchive", "badrow.tar.xz", "new"],
         "badrow.tar.xz: r/scalars.csv: line 2: expected tag,step,value"),
        (["unarchive", "badtag.tar.xz", "new"],
         "badtag.tar.xz: r/scalars.csv: line 2: unknown tag 'loss'"),
        (["unarchive", "bigstep.tar.xz", "new"],
         "bigstep.tar.xz: r/scalars.csv: line 2: step 9223372036854775808 is out of range"),
        (["unarchive", "negstep.tar.xz", "new"],
         "negstep.tar.xz: r/scalars.csv: line 2: step -1372036854775808 is out of range"),
        (["unarchive", "both.tar.xz", "new"], "both.tar.xz: member 'r' is a file and a directory"),
        (["unarchive", "bare.tar.xz", "new"], "bare.tar.xz: run r has no config.yaml"),
    ]  # fmt: skip
    before = sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*"))
    for args, line in cases:
        assert_bad_input(runner.invoke(app, args), line)
    latin = runner.invoke(app, ["unarchive", "latin.tar.xz", "new"])
    assert latin.exit_code == 2 and latin.stderr.count("\n") == 1
    assert latin.stderr.startswith("error: latin.tar.xz: r/scalars.csv: not a UTF-8 CSV file (")
    junk = runner.invoke(app, ["unarchive", "junk.tar.xz", "new"])
    assert junk.exit_code == 2 and junk.stdout == ""
    assert junk.stderr.startswith("error: junk.tar.xz: not a per-dqn archive (.tar.xz): ")
    assert junk.stderr.count("\n") == 1
    assert sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*")) == before


def _one_run(sweep: Path, episodes: list[tuple[int, float]]) -> Path:
    """A finished run dir as the trainer leaves it (``test_report.fake_run``), with its config and
    these training-episode returns."""
    fake_run(sweep, "uniform/s0", "CartPole-v1", "uniform", 0, 9.0, [(100, 1.0), (200, 2.0)])
    run_dir = sweep / "uniform/s0"
    (run_dir / "config.yaml").write_text("env:\n  id: CartPole-v1\n")
    logger = metrics.TensorBoardLogger(run_dir)
    for step, value in episodes:
        logger.scalars({tags.EPISODE_RETURN: value}, step)
    logger.close()
    return run_dir


def test_episodes_that_end_at_one_step_all_come_back(tmp_path):
    """Pins a lost point: with several envs, training episodes can end at the same env step, each
    logged there; the rebuilt event file kept one value per tag and step."""
    run_dir = _one_run(tmp_path / "sweep", [(8, 10.0), (8, 12.0), (9, 3.0)])
    file = tmp_path / "a.tar.xz"
    archive.write_archive(tmp_path / "sweep", file)
    archive.restore_archive(file, tmp_path / "back")
    back = runs.read_curves(tmp_path / "back/uniform/s0", archive.ARCHIVED_TAGS)
    assert back[tags.EPISODE_RETURN] == [(8, 10.0), (8, 12.0), (9, 3.0)]
    assert back == runs.read_curves(run_dir, archive.ARCHIVED_TAGS)
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "back").stat().st_mode & 0o777 == 0o777 & ~umask


def test_a_run_file_that_leaves_the_sweep_dir_is_not_archived(tmp_path):
    """A run's config.yaml that is a link out of the sweep dir (to any file the user can read)
    is refused in one line, as the report refuses such a file; nothing is written."""
    run_dir = _one_run(tmp_path / "sweep", [(8, 1.0)])
    secret = tmp_path / "secret.txt"
    secret.write_text("not the sweep's")
    (run_dir / "config.yaml").unlink()
    (run_dir / "config.yaml").symlink_to(secret)
    result = runner.invoke(app, ["archive", str(tmp_path / "sweep"), str(tmp_path / "a.tar.xz")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {run_dir / 'config.yaml'}: leads outside ")
    assert not (tmp_path / "a.tar.xz").exists()


cells = st.sampled_from(
    ["eval/return_mean", "episode/return", "loss", "0", "7", " 5", "+3", "1_0", "-1", "1.5",
     "nan", "-inf", "9223372036854775807", "9223372036854775808", "x", ""]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(cells, min_size=2, max_size=4), max_size=6))
def test_scalars_read_by_columns_read_as_row_by_row(rows):
    """A scalars file's columns are read whole (``int`` and ``float`` over each); the points, or
    the one line refusing the file, are those of reading it row by row: each row's fields, its
    step and value as ``int`` and ``float`` read them, its tag one archived, its step an
    event's (the row-by-row reading, written out here)."""
    text = "tag,step,value\n" + "".join(",".join(row) + "\n" for row in rows)
    expected: list[tuple[str, int, float]] | str = []
    for number, row in enumerate(rows, start=2):
        try:
            tag, step, value = row
            point = (tag, int(step), float(value))
        except ValueError:
            expected = f"w: line {number}: expected tag,step,value"
            break
        if tag not in ARCHIVED_TAGS:
            expected = f"w: line {number}: unknown tag {tag!r}"
            break
        if not 0 <= point[1] <= 2**63 - 1:
            expected = f"w: line {number}: step {step} is out of range"
            break
        expected.append(point)
    try:
        points = archive._parse_scalars(text.encode(), "w")
    except ValueError as exc:
        assert str(exc) == expected
    else:
        columns = (points.tag.tolist(), points.step.tolist(), points.value.tolist())
        read = [(points.tags[t], s, v) for t, s, v in zip(*columns, strict=True)]
        assert [(t, s, "nan" if v != v else v) for t, s, v in read] == [
            (t, s, "nan" if v != v else v) for t, s, v in expected
        ]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(ARCHIVED_TAGS),
            st.integers(0, 5),
            st.floats(-1e3, 1e3, width=32) | st.just(float("nan")),
        ),
        max_size=200,
    )
)
def test_points_are_written_back_by_step_in_archive_order_without_nans(tmp_path_factory, points):
    """Unarchive's writer: each tag's points by step and, at one step (episodes of several envs
    that end together), in the archive's order; a NaN left out, as the run's logger leaves it
    out."""
    run_dir = tmp_path_factory.mktemp("points")
    text = "tag,step,value\n" + "".join(f"{t},{s},{v!r}\n" for t, s, v in points)
    archive._write_events(run_dir, archive._parse_scalars(text.encode(), "w"))
    files = [(p, p.read_bytes()) for p in run_dir.iterdir()]
    kept = sorted((p for p in points if p[2] == p[2]), key=lambda point: point[1])
    assert events.scalar_curves(files, ARCHIVED_TAGS) == {
        tag: [(s, v) for t, s, v in kept if t == tag] for tag in ARCHIVED_TAGS
    }
