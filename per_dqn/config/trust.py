"""The config keys whose values name code, and the refusal of them in a config read back from a
run dir or a checkpoint (issue 23: a run dir is data, never code).

A config the user passes (``train --config``, ``per_dqn.train(config)``) is the user's own input
and is trusted. A run dir's or checkpoint's ``config.yaml`` may come from anyone (a shared disk,
an archive, a colleague) and has no checksum: where it names code to import, the command that
reads it back (``eval``, ``train --resume``, ``per_dqn.load``, ``per_dqn.resume``) refuses it
unless the user opts in for that call (``--trust-code``, ``trust_code=True``); the opt-in is
never written anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from per_dqn import families
from per_dqn.config.messages import ConfigError
from per_dqn.config.models import Config

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


def code_keys(config: Config) -> dict[str, str]:
    """The keys of ``config`` whose values name code that building the run would import, with
    those values (empty for a config that names none)."""
    named = {key: value_of(config) for key, value_of in CODE_KEYS.items()}
    return {key: value for key, value in named.items() if value is not None}


class UntrustedCodeError(ConfigError):
    """A config read back from a run dir or a checkpoint names code, and the user did not allow
    it; ``problems`` has one line per key."""


def refuse_untrusted_code(
    config: Config, label: str, *, trust_code: bool = False, allowed: Collection[str] = ()
) -> None:
    """Refuses ``config``, read back from ``label`` (a run dir's or a checkpoint's
    ``config.yaml``), if it names code the user did not allow, before anything is imported.

    Args:
        config: the config as read back.
        label: the file it was read from, named in the refusal.
        trust_code: the user's opt-in for this call: every key is allowed.
        allowed: keys the user consented to otherwise (``agent.network`` when the caller passed
            the very factory the config names).

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
    if problems:
        raise UntrustedCodeError(problems)
