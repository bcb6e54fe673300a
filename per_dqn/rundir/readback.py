"""The one reader of every file read back from a run dir, a sweep dir or a checkpoint (issue 43).

A run dir or a sweep dir may come from someone else (a shared disk, an archive, a colleague), so
nothing read from one is trusted: not its paths, not its kind of file, not its size, not its
shape. Every such file goes through ``open_file`` (and its ``read_bytes`` / ``read_json`` forms),
which:

1. resolves its path and refuses one that a link (or ``..``) leads out of the dir, then opens
   the resolved path from the dir's own descriptor one component at a time, each with
   ``O_NOFOLLOW``: a component swapped for a link since the resolution is refused, never
   followed, so the file opened is the file checked (a link that stays inside is followed);
2. checks that it is a regular file (``fstat``; it is opened non-blocking, so a FIFO or a device
   is refused at once instead of blocking the read or never ending);
3. caps its size by its kind of file (``KINDS``), before a byte of it is read;
4. bounds the nesting depth of JSON before parsing it (``max_depth``: a 1.5 KB ``[[[[...`` is a
   ``RecursionError`` in ``json.loads``);
5. validates its shape with a strict pydantic model where the caller gives one.

A failure is a ``ReadBackError``: a ``ValueError`` whose message is one line naming the file and
what is wrong (control characters escaped), and whose ``missing`` says the file is simply not
there. Each caller turns it into its own error type (``CheckpointError``, a skipped run, ...).

``walk`` lists a tree without recursion and without following links, to a bounded depth: a nest
1,200 dirs deep is no ``RecursionError``.

The root itself is the caller's (``runs/latest`` may be a link): only what lies below it is
checked. The event files that TensorBoard's own reader opens by path are checked here first
(``check_file``): a link out, a FIFO or an oversized file is refused before TensorBoard opens it.
TensorBoard then opens them by path again: a file swapped in that moment is the one limit left
(whoever can swap it can write the run's curves anyway).
"""

from __future__ import annotations

import collections
import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from per_dqn.config.messages import printable

M = TypeVar("M", bound=BaseModel)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Kind:
    """A kind of file read back, with its limits.

    Attributes:
        name: how errors name the kind.
        max_bytes: the largest such file read; None: no more than the RAM available now (the
            replay memory's arrays, as large as the memory the run held).
        max_depth: the deepest JSON nesting parsed (JSON kinds only).
    """

    name: str
    max_bytes: int | None
    max_depth: int = 32


# One entry per kind of file read back. A summary (its wall-time sessions grow with each resume)
# is a few KiB, a run record a few dozen bytes, a manifest a few hundred bytes; a sweep's record
# grows with its runs (a few MB for thousands); a checkpoint's tree metadata with the memory's RNG
# and cursor values (KiBs); torch files with the network (the Nature CNN with Adam's state is ~40
# MB: 4 GiB leaves room for a user's network two orders larger); event files with the run's
# length (a 50M-frame Atari run logs ~100 MB).
KINDS = {
    "summary": Kind("summary.json", 16 * MiB),
    "run": Kind("run.json", 4 * KiB),
    "sweep": Kind("sweep.json", 64 * MiB),
    "manifest": Kind("manifest.json", 1 * MiB),
    "config": Kind("config.yaml", 1 * MiB),
    "tree": Kind("checkpoint metadata", 64 * MiB, max_depth=64),
    "arrays": Kind("checkpoint arrays", None),
    "weights": Kind("torch file", 4 * GiB),
    "events": Kind("TensorBoard event file", 1 * GiB),
    "text": Kind("text file", 1 * MiB),
}
# A sweep's run dirs are <env>/<arm>/<settings>/s<seed> at most below it; a run dir holds
# checkpoints/step_*/; wandb nests a few more. Nothing the tool writes is deeper than this.
MAX_WALK_DEPTH = 16


class ReadBackError(ValueError):
    """A file read back that is refused or cannot be read: one line naming it.

    Attributes:
        path: the file.
        problem: what is wrong, in words.
        reason: which check refused it: ``missing``, ``outside`` (a link out of the dir),
            ``special`` (not a regular file), ``too_big``, ``unreadable``, ``deep`` (JSON nested
            too deep), ``syntax`` (not JSON or not UTF-8), ``shape`` (not the model's shape).
    """

    def __init__(self, path: str | Path, problem: str, reason: str = "shape") -> None:
        super().__init__(f"{printable(str(path))}: {problem}")
        self.path = str(path)
        self.problem = problem
        self.reason = reason

    @property
    def missing(self) -> bool:
        """The file is not there (a caller may treat that as "none yet")."""
        return self.reason == "missing"


def _parts(relative: str | Path) -> list[str]:
    """``relative``'s components, refused where one leads up or the path is absolute."""
    pure = PurePosixPath(relative)
    if "\0" in str(relative):
        raise ReadBackError(printable(str(relative)), "a path holding a NUL byte", reason="outside")
    if pure.is_absolute() or any(part == ".." for part in pure.parts):
        raise ReadBackError(
            relative, "not a path inside its dir (absolute, or through ..)", reason="outside"
        )
    return [part for part in pure.parts if part != "."]


_FILE_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory",
               stat.S_IFREG: "a regular file",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFLNK: "a symbolic link"}  # fmt: skip


def _what(mode: int) -> str:
    return _FILE_KINDS.get(stat.S_IFMT(mode), "a special file")


def available_ram_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` (Linux), else free physical pages, else None: the
    most a file read back may hold in memory (``KINDS["arrays"]``), and what the memory planner
    (``per_dqn.training.memory_plan``) weighs a replay memory against."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def limit(kind: Kind) -> int:
    """``kind``'s size cap in bytes, the RAM available now for a kind capped by it."""
    if kind.max_bytes is not None:
        return kind.max_bytes
    available = available_ram_bytes()
    return available if available is not None else 1 << 62


def open_file(root: str | Path, relative: str | Path, kind: Kind) -> IO[bytes]:
    """A binary file object on ``root / relative``, opened as the module docstring says.

    The path is resolved first (``os.path.realpath``): a link that stays inside ``root`` is
    followed, one that leads out is refused. The resolved path is then opened from ``root``'s
    real dir one component at a time, each with ``O_NOFOLLOW``: a component swapped for a link
    since the resolution is refused, never followed, so the file opened is the one checked.

    Args:
        root: the dir read back (it may itself be a link: it is the caller's).
        relative: the file's path below it, plain components only.
        kind: the kind of file, for its size cap.

    Raises:
        ReadBackError: leads out of ``root``, not a regular file, over the size cap, not there
            (``missing``), or unreadable; ``reason`` says which.
    """
    label = Path(root) / relative
    parts = _parts(relative)
    if not parts:
        raise ReadBackError(label, "not a file", reason="special")
    base = os.path.realpath(root)
    target = os.path.realpath(label)
    if os.path.commonpath([base, target]) != base or target == base:
        raise ReadBackError(label, f"leads outside {root} (to {target}); refused", reason="outside")
    inner = Path(target).relative_to(base).parts
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        dir_fd = os.open(base, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    except FileNotFoundError:
        raise ReadBackError(label, "no such file", reason="missing") from None
    except OSError as exc:
        problem = f"cannot open its dir ({exc.strerror})"
        raise ReadBackError(label, problem, reason="unreadable") from None
    try:
        for part in inner[:-1]:
            try:
                fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=dir_fd)
            except FileNotFoundError:
                raise ReadBackError(label, "no such file", reason="missing") from None
            except OSError as exc:
                raise _open_error(label, part, dir_fd, exc, last=False) from None
            os.close(dir_fd)
            dir_fd = fd
        return open_at(dir_fd, inner[-1], kind, label)
    finally:
        os.close(dir_fd)


def open_at(dir_fd: int, name: str, kind: Kind, label: str | Path) -> IO[bytes]:
    """A binary file object on ``name`` in the open dir ``dir_fd`` (a checkpoint's, read through
    one handle), opened with ``O_NOFOLLOW`` and non-blocking, once ``fstat`` says it is a regular
    file within ``kind``'s size cap (the size is checked before a byte is read).

    Raises:
        ReadBackError: as ``open_file``; ``label`` names the file.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ReadBackError(label, "no such file", reason="missing") from None
    except OSError as exc:
        raise _open_error(label, name, dir_fd, exc, last=True) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReadBackError(label, f"{_what(st.st_mode)}, not a regular file", reason="special")
        cap = limit(kind)
        if st.st_size > cap:
            raise ReadBackError(
                label, f"{st.st_size:,} bytes, over the {cap:,} a {kind.name} may have",
                reason="too_big",
            )  # fmt: skip
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_error(
    label: str | Path, part: str, dir_fd: int, exc: OSError, last: bool
) -> ReadBackError:
    """Why ``part`` (the file itself when ``last``, else a dir on the way) could not be opened:
    a link (``O_NOFOLLOW``'s ``ELOOP``) is named as one."""
    try:
        mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    wanted = "a regular file" if last else "a directory"
    if stat.S_ISLNK(mode) or (not last and exc.errno == errno.ENOTDIR):
        what = f"{_what(mode)}, not {wanted}"
        return ReadBackError(label, what if last else f"{part!r} is {what}", reason="special"
                             if not stat.S_ISLNK(mode) else "outside")  # fmt: skip
    return ReadBackError(label, f"cannot open it ({exc.strerror or exc})", reason="unreadable")


def check_file(root: str | Path, relative: str | Path, kind: Kind) -> Path:
    """``root / relative`` once ``open_file`` accepts it (for a file another library opens by
    path, such as TensorBoard's event files); the file is closed again.

    Raises:
        ReadBackError: as ``open_file``.
    """
    with open_file(root, relative, kind):
        pass
    return Path(root) / relative


def read_bytes(root: str | Path, relative: str | Path, kind: Kind) -> bytes:
    """The whole file, through ``open_file``.

    Raises:
        ReadBackError: as ``open_file`` and ``read_all``.
    """
    with open_file(root, relative, kind) as file:
        return read_all(file, kind, Path(root) / relative)


def read_all(file: IO[bytes], kind: Kind, label: str | Path) -> bytes:
    """The rest of an open file, read to at most ``kind``'s cap even if the file grows meanwhile.

    Raises:
        ReadBackError: it could not be read, or it grew past the cap while being read.
    """
    cap = limit(kind)
    try:
        # Asked for no more than the file holds (plus one byte, to see it grow): a read of the cap
        # itself reserves that much first (4 GiB for a 1 KB agent.pt, refused under a ulimit).
        data = file.read(min(cap, os.fstat(file.fileno()).st_size) + 1)
    except OSError as exc:
        raise ReadBackError(
            label, f"cannot read it ({exc.strerror})", reason="unreadable"
        ) from None
    while len(data) <= cap:  # it grew since its size was read: the rest, to the cap
        more = file.read(min(cap + 1 - len(data), 1 << 20))
        if not more:
            break
        data += more
    if len(data) > cap:
        raise ReadBackError(
            label, f"grew past the {cap:,} bytes a {kind.name} may have", reason="too_big"
        )
    return data


def read_text(root: str | Path, relative: str | Path, kind: Kind) -> str:
    """``read_bytes`` decoded as UTF-8.

    Raises:
        ReadBackError: as ``read_bytes``, or not UTF-8.
    """
    data = read_bytes(root, relative, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadBackError(
            Path(root) / relative, f"not UTF-8 text ({exc.reason})", reason="syntax"
        ) from None


# A JSON string: its brackets do not nest anything.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do not
    count), found without parsing, so it can run before ``json.loads`` would recurse."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(data: bytes | str, label: str | Path, kind: Kind) -> Any:
    """JSON ``data`` parsed once its nesting is known to be within ``kind.max_depth``.

    Raises:
        ReadBackError: not UTF-8, nested too deep, or not JSON.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise ReadBackError(label, f"not UTF-8 text ({exc.reason})", reason="syntax") from None
    # The scan runs only where there are brackets enough to nest too deep.
    if text.count("[") + text.count("{") > kind.max_depth:
        depth = json_depth(text)
        if depth > kind.max_depth:
            raise ReadBackError(
                label, f"nested {depth} levels deep, past the {kind.max_depth} a {kind.name} "
                "may have", reason="deep",
            )  # fmt: skip
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        problem = f"cannot be read as JSON ({' '.join(str(exc).split())[:200]})"
        raise ReadBackError(label, problem, reason="syntax") from None


def read_json(
    root: str | Path, relative: str | Path, kind: Kind, model: type[M] | None = None
) -> Any:
    """A JSON file read back: ``read_bytes``, ``parse_json``, then ``model`` (strict) if given.

    Returns:
        The parsed value, or the validated model.

    Raises:
        ReadBackError: as ``read_bytes`` and ``parse_json``, or not of ``model``'s shape (the
            first problem named by its dotted field).
    """
    label = Path(root) / relative
    value = parse_json(read_bytes(root, relative, kind), label, kind)
    return value if model is None else validate(value, model, label)


def validate(value: Any, model: type[M], label: str | Path) -> M:
    """``value`` as ``model``, validated strictly.

    Raises:
        ReadBackError: one line naming the first field that is wrong and what it holds.
    """
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "its top level"
        shown = printable(repr(error.get("input")))[:80]
        raise ReadBackError(
            label, f"not a {model.__name__} record: {where}: {error['msg']} (got {shown})"
        ) from None


def walk(
    root: Path, max_depth: int = MAX_WALK_DEPTH, hidden: bool = True
) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``(dir, files, others)`` for ``root`` and every dir below it, breadth first, to
    ``max_depth`` levels below ``root``, without recursion and without following a link:
    ``files`` are the regular files' names, ``others`` the rest that is not a dir entered (links,
    FIFOs, devices, and the dirs at the depth bound, not entered), each sorted. A link to a dir
    is not entered. A dir that cannot be listed is yielded empty. ``hidden`` False: dirs whose
    names start with ``.`` are not entered.
    """
    queue = collections.deque([(Path(root), 0)])
    while queue:
        directory, depth = queue.popleft()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            entries = []
        files, others = [], []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth >= max_depth:
                        others.append(entry.name)  # not entered: named, as a link is
                    elif hidden or not entry.name.startswith("."):
                        queue.append((Path(entry.path), depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
                else:
                    others.append(entry.name)
            except OSError:
                others.append(entry.name)
        yield directory, files, others
