"""Tensors read back from a ``torch.save`` file without running code: a checkpoint's ``.pt``
parts, and ``model.pt``, which has no manifest.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from typing import Any

from per_dqn.config.messages import error_text, one_line
from per_dqn.rundir.checkpoint import CheckpointError


def load_weights(data: bytes, label: str, device: Any = "cpu") -> Any:
    """Reads a ``torch.save`` file's tensors and plain containers, running no code.

    ``torch.load(weights_only=True)`` refuses any other object a pickle names. It does not check
    the CRC-32 its zip container keeps for every member, so a flipped byte would load silently as
    other weights: that check is made here first (``model.pt`` has no manifest to catch it).

    Args:
        data: the file's bytes.
        label: how to name the file in errors (its path).
        device: where the tensors go.

    Raises:
        CheckpointError: one line naming ``label``: a truncated or corrupt file, or one whose
            pickle names anything but tensors and containers (it could run code).
    """
    import torch

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{label}: truncated or corrupt, not a whole torch file ({one_line(exc)})"
        ) from None
    if bad is not None:
        raise CheckpointError(f"{label}: corrupt: its member {bad} fails its CRC-32 check")
    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = unpickling_reason(str(exc))
        raise CheckpointError(
            f"{label}: refused: it holds more than tensors ({reason}), and loading it could run "
            "code"
        ) from None
    except Exception as exc:  # torch's reader raises RuntimeError, KeyError, ... by damage
        raise CheckpointError(f"{label}: cannot load ({error_text(exc, 200)})") from None


# What torch's weights-only refusal says around its reason: advice on `weights_only`, not why.
_TORCH_ADVICE = ("weights only load failed", "in pytorch", "re-running", "(1)", "(2)", "check the "
                 "documentation", "alternatively")  # fmt: skip


def unpickling_reason(message: str) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, from its message: the sentence that
    names what the pickle asked for ("Trying to load unsupported GLOBAL posix.system whose module
    posix is blocked", "Unsupported global: GLOBAL io.open was not an allowed global by
    default"), not torch's advice around it, whose wording changes between releases.

    The reason is looked for, in order, after ``WeightsUnpickler error:``, in a line naming a
    ``GLOBAL``, then in the first line that is not advice; the first sentence of it is kept.
    """
    lines = [" ".join(line.split()) for line in message.splitlines()]
    lines = [line for line in lines if line]
    picks = [line.split("WeightsUnpickler error:", 1)[1] for line in lines
             if "WeightsUnpickler error:" in line]  # fmt: skip
    picks += [line for line in lines if "GLOBAL" in line]
    picks += [line for line in lines if not line.lower().startswith(_TORCH_ADVICE)]
    text = (picks or lines or [message])[0].strip()
    sentence = re.split(r"(?<=[^.\s])\.(?:\s|$)", text, maxsplit=1)[0]
    return one_line(sentence)[:200]
