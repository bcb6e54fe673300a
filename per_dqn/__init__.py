"""per-dqn: Double/Dueling DQN with Prioritized Experience Replay.

The Python API (docs/api.md)::

    import per_dqn

    result = per_dqn.train("cartpole", overrides={"train.total_env_steps": 20_000})
    policy = per_dqn.load(result.run_dir)

``per_dqn.memory`` is the replay memory on its own (numpy only), for any training loop.
"""

from typing import Any as _Any

__version__ = "0.1.0"

_API = ("train", "resume", "load", "Policy", "TrainResult")
_MANY = ("train_many", "ManyResult")
__all__ = [*_API, *_MANY, "__version__"]


def __getattr__(name: str) -> _Any:
    # The API is imported on first use: `import per_dqn` (and the CLI's config checks) stay free
    # of torch's start-up cost.
    if name in _API:
        from per_dqn import api

        return getattr(api, name)
    if name in _MANY:
        from per_dqn.packs import many

        return getattr(many, name)
    raise AttributeError(f"module 'per_dqn' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API's names (imported on first use), so that ``dir(per_dqn)`` and a notebook's
    completion find them."""
    return sorted({*globals(), *__all__} - {"_Any", "_API", "_MANY"})
