"""The TensorBoard logger: a run's scalars, text, HParams and Custom Scalars records in its event
file, mirrored to another tracker where one is on.

What the tags are called and mean is ``tags.py``'s; this module only writes them, and turns a
failed write into a ``fileio.WriteError``. The config's two TensorBoard forms live beside it:
``flatten_config`` for the HParams tab (which ``sweeps.plan`` also compares configs by) and
``config_as_markdown`` for the text tab.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from per_dqn.logs.tags import HPARAMS_METRICS
from per_dqn.rundir.fileio import writing


class ScalarSink(Protocol):
    """Another tracker that receives the scalars TensorBoard does (``tracking.WandbTracker``)."""

    def log(self, values: Mapping[str, float], step: int) -> None:
        """One point per tag at env step ``step``."""


HParamValue = bool | int | float | str


# The keys a run outside a sweep shows first in the HParams tab: what an ablation varies.
DEFAULT_VARYING = ("replay.kind", "run.seed", "env.id")


def flatten_config(data: Mapping[str, Any], prefix: str = "") -> dict[str, HParamValue]:
    """A config dump (``Config.model_dump(mode="json")``) as ``{"section.key": value}``, as the
    HParams tab takes it: bools, numbers and strings as they are, lists and None as their JSON
    text (``"[256, 256]"``, ``"null"``)."""
    flat: dict[str, HParamValue] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


def config_as_markdown(config_yaml: str) -> str:
    """The resolved config as a Markdown code block (indented, so TensorBoard keeps the layout)."""
    return "\n".join("    " + line for line in config_yaml.splitlines())


class TensorBoardLogger:
    """Writes scalars and text to a TensorBoard event file under ``run_dir``.

    Args:
        run_dir: directory that receives the ``events.out.tfevents.*`` file.
        purge_step: a resumed run's first env step that may be logged again: readers
            (TensorBoard's Python loader and its Rust data server alike) drop the points at or
            after it that earlier event files in ``run_dir`` hold, so a curve continues from the
            checkpoint without duplicated points.
        mirror: receives every scalar written, at the same step (a Weights & Biases run).
    """

    def __init__(
        self, run_dir: Path, purge_step: int | None = None, mirror: ScalarSink | None = None
    ) -> None:
        # Imported here: it pulls in tensorboard, which a config check never needs.
        from torch.utils.tensorboard import SummaryWriter

        self.mirror = mirror

        if purge_step is not None:
            _wait_for_a_later_event_file_name(run_dir)
        _silence_event_writer_threads()
        self.path = run_dir / "events.out.tfevents.*"  # until the writer names its file
        with writing(self.path):
            self._writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
        name = getattr(self._writer.file_writer.event_writer, "_file_name", None)
        if name is not None:
            self.path = Path(name)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """One point per tag at env step ``step``; NaN values are skipped.

        Raises:
            WriteError: the event file could not be written (here or, earlier, in the writer's
                background thread, whose failure surfaces at the next call).
        """
        from tensorboard.compat.proto.summary_pb2 import Summary

        kept = {tag: value for tag, value in values.items() if not math.isnan(value)}
        if kept:
            # One event holds the step's points, each as ``add_scalar`` writes it (a float32
            # ``simple_value``): every event is a hand-off to the writer's thread, and with one
            # event per tag those took 11% of a MinAtar pack's time in a profile on a busy machine.
            point = Summary(
                value=[Summary.Value(tag=tag, simple_value=float(x)) for tag, x in kept.items()]
            )
            with writing(self.path):
                self._writer.file_writer.add_summary(point, step)
        if self.mirror is not None and kept:
            self.mirror.log(kept, step)

    def hparams(
        self,
        hparams: Mapping[str, HParamValue],
        start_time: float,
        *,
        name: str,
        varying: Sequence[str] = DEFAULT_VARYING,
    ) -> None:
        """The HParams plugin's experiment and session-start records, in this event file (not a
        subfolder, as ``SummaryWriter.add_hparams`` would make): ``hparams`` are the session's
        values, ``HPARAMS_METRICS`` its metrics (scalar tags written at the end of the run).

        What the tab shows at a glance: the session is named ``name`` (the run's, as its sweep
        names it; TensorBoard would name it by a hash of the values, and merge two runs of the
        same config and seed into one row); its columns are the keys in ``varying`` (the
        sweep's axes, marked as differing) and the metrics. The experiment lists those keys
        alone: TensorBoard shows the first five it lists, sorted by name past the differing
        ones, so the whole config filled two more columns with ``agent.adam_eps`` and
        ``agent.channels_last`` and pushed the metrics past a 1280-pixel screen (issue 45). The
        session still records every key, and the config is in the Text tab. Integers are sent
        as their text (``3``, not ``3.0000``).

        TensorBoard keeps the first record of a tag in a run dir, so a resumed run does not write
        them again.
        """
        from tensorboard.plugins.hparams import plugin_data_pb2
        from tensorboard.plugins.hparams import summary_v2 as hp

        values = {
            key: str(value) if isinstance(value, int) and not isinstance(value, bool) else value
            for key, value in hparams.items()
        }
        first = [key for key in varying if key in values]
        experiment = hp.hparams_config_pb(
            hparams=[hp.HParam(key) for key in first],
            metrics=[hp.Metric(tag, display_name=title) for tag, title in HPARAMS_METRICS],
            time_created_secs=start_time,
        )
        plugin = experiment.value[0].metadata.plugin_data
        data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
        for info in data.experiment.hparam_infos:
            info.differs = info.name in first
        plugin.content = data.SerializeToString()
        session = hp.hparams_pb(values, trial_id=name, start_time_secs=start_time)
        with writing(self.path):
            self._writer.file_writer.add_summary(experiment)
            self._writer.file_writer.add_summary(session)

    def custom_scalars(self, layout: Mapping[str, Any]) -> None:
        """The Custom Scalars tab's layout: ``{category: {chart title: ["Multiline", [tag
        regexes]]}}``."""
        with writing(self.path):
            self._writer.add_custom_scalars(dict(layout))

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """A text entry (TensorBoard renders it as Markdown)."""
        with writing(self.path):
            self._writer.add_text(tag, text, step)

    def flush(self) -> None:
        """Writes every pending event to disk."""
        with writing(self.path):
            self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        with writing(self.path):
            self._writer.close()


_previous_excepthook = threading.excepthook


def _silence_event_writer_threads() -> None:
    """Keeps a failed write in TensorBoard's writer thread from printing a traceback.

    The thread stores its exception and ``_AsyncWriter`` raises it in the main thread at the next
    write, flush or close, where ``TensorBoardLogger`` turns it into a ``WriteError``; the
    traceback ``threading`` would print as well is noise on top of that one-line error.
    """
    if getattr(threading.excepthook, "_per_dqn", False):
        return
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.thread, _AsyncWriterThread) and isinstance(args.exc_value, OSError):
            return
        _previous_excepthook(args)

    hook._per_dqn = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def _wait_for_a_later_event_file_name(run_dir: Path) -> None:
    """Sleeps until a new event file's name sorts after every existing one in ``run_dir``.

    Readers load a dir's event files in name order, and a name is
    ``events.out.tfevents.<unix seconds>.<host>.<pid>.<n>``: within one second the pid (compared as
    text) could put a resumed run's file before the file it continues, and the purge would then
    hit the wrong points. A resume costs at most one second here.
    """
    newest, now = 0, time.time()
    for path in run_dir.glob("events.out.tfevents.*"):
        stamp = path.name.split(".")[3]
        # A name stamped in the future was not written by a run here (a run dir read back may
        # hold anything): waiting for it would hang the resume.
        if stamp.isdigit() and int(stamp) <= now + 1:
            newest = max(newest, int(stamp))
    while time.time() < newest + 1:
        time.sleep(0.05)
