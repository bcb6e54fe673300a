"""The config keys whose values name code or turn on a tracker, and the refusal of them in a
config read back from a run dir or a checkpoint (issue 23: a run dir is data, never code; issue
43: nothing from a run dir configures a third-party library).

A config the user passes (``train --config``, ``--track``, ``per_dqn.train(config)``) is the
user's own input and is trusted. A run dir's or checkpoint's ``config.yaml`` may come from anyone
(a shared disk, an archive, a colleague) and has no checksum: where it names code to import, the
command that reads it back (``eval``, ``train --resume``, ``per_dqn.load``, ``per_dqn.resume``)
refuses it unless the user opts in for that call (``--trust-code``, ``trust_code=True``); the
opt-in is never written anywhere. A command that trains from it (``train --resume``,
``per_dqn.resume``) refuses a ``run.track`` other than ``none`` the same way, with the same
opt-in: a tracker sends the run, with the user's credentials, to a service (``eval`` and
``load`` start none, so they do not ask).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from per_dqn.config.messages import ConfigError
from per_dqn.config.models import Config
from per_dqn.envs import families

# How a user allows what is refused, as the refusal says it.
OPT_IN = "--trust-code (Python: trust_code=True)"


def _network(config: Config) -> str | None:
    # Anything but a built-in name is a `package.module:factory`, imported and called.
    value = config.agent.network
    return None if value in (families.AUTO_NETWORK, *families.NETWORK_NAMES) else value


def _env_id(config: Config) -> str | None:
    # gymnasium imports the module before the colon of `module:EnvName` (`gym.make`).
    value = config.env.id
    return value if ":" in value else None


# The one list of keys that can name code, each with the test of its value: a key added to the
# config that can name code belongs here (tests/test_trust.py checks every string key is listed
# or known to name none).
CODE_KEYS: dict[str, Callable[[Config], str | None]] = {
    "agent.network": _network,
    "env.id": _env_id,
}


def _track(config: Config) -> str | None:
    # wandb, started with the user's WANDB_API_KEY, sends the run to its service.
    value = config.run.track
    return None if value == "none" else value


# The keys that turn on a tracker when a run trains, each with the test of its value: refused
# read back by a command that trains, with the same opt-in as code (issue 43, E2).
TRACKING_KEYS: dict[str, Callable[[Config], str | None]] = {"run.track": _track}


def code_keys(config: Config) -> dict[str, str]:
    """The keys of ``config`` whose values name code that building the run would import, with
    those values (empty for a config that names none)."""
    named = {key: value_of(config) for key, value_of in CODE_KEYS.items()}
    return {key: value for key, value in named.items() if value is not None}


def tracking_keys(config: Config) -> dict[str, str]:
    """The keys of ``config`` that turn on a tracker when the run trains, with their values
    (empty for a config that tracks with TensorBoard alone)."""
    named = {key: value_of(config) for key, value_of in TRACKING_KEYS.items()}
    return {key: value for key, value in named.items() if value is not None}


class UntrustedCodeError(ConfigError):
    """A config read back from a run dir or a checkpoint names code (or, for a run it trains,
    turns on a tracker), and the user did not allow it; ``problems`` has one line per key."""


def refuse_untrusted_code(
    config: Config,
    label: str,
    *,
    trust_code: bool = False,
    allowed: Collection[str] = (),
    trains: bool = False,
) -> None:
    """Refuses ``config``, read back from ``label`` (a run dir's or a checkpoint's
    ``config.yaml``), if it names code the user did not allow, before anything is imported;
    with ``trains``, also if it turns on a tracker (``TRACKING_KEYS``), before it starts.

    Args:
        config: the config as read back.
        label: the file it was read from, named in the refusal.
        trust_code: the user's opt-in for this call: every key is allowed.
        allowed: keys the user consented to otherwise (``agent.network`` when the caller passed
            the very factory the config names).
        trains: the caller trains a run from ``config`` (``train --resume``, ``resume``), which
            starts its tracker; ``eval`` and ``load`` start none.

    Raises:
        UntrustedCodeError: one line per refused key, naming it, its value and the opt-in.
    """
    if trust_code:
        return
    problems = [
        f"{label}: {key}: {value!r} names code to import, and a run dir read back runs none of "
        f"its contents; if you trust where it came from, pass {OPT_IN}"
        for key, value in code_keys(config).items()
        if key not in allowed
    ]
    problems += [
        f"{label}: {key}: {value!r} would send the run to a tracker's service with your "
        f"credentials, and a run dir read back turns on no tracker; if you trust where it came "
        f"from, pass --track {value} (Python: track={value!r})"
        for key, value in (tracking_keys(config) if trains else {}).items()
        if key not in allowed
    ]
    if problems:
        raise UntrustedCodeError(problems)
