"""Trees of arrays on disk: a nested dict whose leaves are arrays or JSON values, as an
uncompressed ``.npz`` of its arrays and a JSON file that marks where each array sat. The replay
memory's, the loop's and the envs' states are written this way in a checkpoint
(``checkpoint``); reading either file runs no code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from per_dqn.rundir import readback

# Marks where an array sat in a JSON tree whose arrays went to the npz.
_ARRAY_KEY = "__array__"


class _CountedWrites:
    """A file whose writes are counted (``np.savez`` streams each array through it in chunks)."""

    def __init__(self, file: IO[bytes], count: Callable[[int], None]) -> None:
        self._file, self._count = file, count

    def write(self, data: Any) -> int:
        written = self._file.write(data)
        self._count(memoryview(data).nbytes)
        return written

    def __getattr__(self, name: str) -> Any:  # tell, seek, flush, ... as the file's
        return getattr(self._file, name)


def tree_nbytes(tree: Any) -> int:
    """The bytes of a tree's arrays (numpy's or torch's): what a checkpoint writes of it,
    headers aside."""
    if isinstance(tree, Mapping):
        return sum(tree_nbytes(value) for value in tree.values())
    if isinstance(tree, list | tuple):
        return sum(tree_nbytes(value) for value in tree)
    nbytes = getattr(tree, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


def save_tree(
    npz_path: Path, json_path: Path, tree: Any, progress: Callable[[int], None] | None = None
) -> None:
    """Writes a nested dict whose leaves are arrays or JSON values: arrays to an uncompressed
    ``.npz``, everything else to a JSON file that marks where each array was.

    The arrays are streamed from where they are (numpy writes each in chunks of 16 MiB), so
    views of a memory's arrays are written without a copy of it; ``progress`` is told of each
    chunk written (its bytes).

    JSON keeps Python ints of any size (a PCG64 state is 128 bits) and floats exactly. Reading
    either file runs no code: JSON, and ``np.load(allow_pickle=False)``.

    Raises:
        TypeError: a leaf of another type, an object array, or a key that is not a string.
    """
    arrays: dict[str, np.ndarray] = {}
    skeleton = _split(tree, "", arrays)
    with open(npz_path, "wb") as file:
        np.savez(file if progress is None else _CountedWrites(file, progress), **arrays)
    json_path.write_text(json.dumps(skeleton, indent=1) + "\n", encoding="utf-8")


def load_tree(npz_path: Path, json_path: Path) -> Any:
    """Reads what ``save_tree`` wrote; an npz that holds pickled objects is refused
    (``ValueError``), never unpickled."""
    skeleton = readback.read_bytes(json_path.parent, json_path.name, readback.KINDS["tree"])
    with np.load(npz_path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return join_tree(readback.parse_json(skeleton, json_path, readback.KINDS["tree"]), arrays)


def _split(node: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if not isinstance(key, str) or key == _ARRAY_KEY:
                raise TypeError(f"tree keys must be strings other than {_ARRAY_KEY!r}, got {key!r}")
            out[key] = _split(value, f"{path}.{key}" if path else key, arrays)
        return out
    if isinstance(node, np.ndarray):
        if node.dtype.hasobject:
            raise TypeError(f"cannot store an object array at {path!r} in a checkpoint tree")
        if path in arrays:
            raise TypeError(f"two arrays of a checkpoint tree are both at {path!r}")
        arrays[path] = node
        return {_ARRAY_KEY: path}
    if isinstance(node, np.generic):
        return node.item()
    if isinstance(node, list | tuple):
        return [_split(value, f"{path}.{i}", arrays) for i, value in enumerate(node)]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise TypeError(f"cannot store {type(node).__name__} at {path!r} in a checkpoint tree")


def join_tree(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, dict):
        if set(node) == {_ARRAY_KEY}:
            return arrays[node[_ARRAY_KEY]]
        return {key: join_tree(value, arrays) for key, value in node.items()}
    if isinstance(node, list):
        return [join_tree(value, arrays) for value in node]
    return node
