"""TensorBoard's vocabulary for a run: every tag's name and meaning, and the tabs' layouts.

The one catalogue of what a run logs (``SCALAR_TAGS``; the docs site's tag reference is generated
from it), the HParams tab's metrics, the Custom Scalars tab's charts, and the maps from the names
the learner and the memory report (``LearnResult.metrics``, ``ReplayMemory.diagnostics``) to their
tags, derived from the catalogue so a new metric needs one entry here. Plain data: it imports
nothing of ``per_dqn``, so the loop, the health panel, the logger and the sweeps' readers all share
it.
"""

from __future__ import annotations

from collections.abc import Mapping

PER_SAMPLED_PRIORITY = "per/sampled_priority"
PER_MEAN_PRIORITY = "per/mean_priority"
PER_MAX_PRIORITY = "per/max_priority"
PER_BETA = "per/beta"
PER_IS_WEIGHT_MEAN = "per/is_weight_mean"
PER_IS_WEIGHT_MIN = "per/is_weight_min"
PER_IS_WEIGHT_ESS = "per/is_weight_ess"
PER_NEVER_REPLAYED = "per/never_replayed_share"
PER_SAMPLE_AGE = "per/sample_age_steps"
PER_PRIORITY_AGE = "per/priority_age_steps"
PER_TREE_DRIFT = "per/tree_drift"
PER_PRIORITY_RATIO = "per/priority_ratio"
TRAIN_LOSS = "train/loss"
TRAIN_LOSS_UNWEIGHTED = "train/loss_unweighted"
TRAIN_Q_MEAN = "train/q_mean"
TRAIN_TD_ERROR_ABS = "train/td_error_abs"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_LEARNING_RATE = "train/learning_rate"
TRAIN_REDUCIBLE_LOSS = "train/reducible_loss"
TRAIN_IRREDUCIBLE_LOSS = "train/irreducible_loss"
TRAIN_REDUCIBLE_CLIPPED = "train/reducible_clipped_share"
TRAIN_LARGE_BATCH_TD_MEAN = "train/large_batch_td_mean"
TRAIN_LARGE_BATCH_TD_STD = "train/large_batch_td_std"
TRAIN_PAL_LAMBDA = "train/pal_lambda"
TRAIN_PICKED_WEIGHT_MEAN = "train/picked_weight_mean"
EXPLORE_EPSILON = "explore/epsilon"
EPISODE_RETURN = "episode/return"
EPISODE_LENGTH = "episode/length"
EVAL_RETURN_MEAN = "eval/return_mean"
EVAL_RETURN_STD = "eval/return_std"
EVAL_LENGTH_MEAN = "eval/length_mean"
PERF_SPS = "perf/sps"
# A distributed run's (``per_dqn.distributed``): its actors, as the learner sees their blocks.
APEX_BLOCKS_PER_S = "apex/blocks_per_s"
APEX_ACTOR_SPS_MIN = "apex/actor_sps_min"
APEX_ACTOR_SPS_MAX = "apex/actor_sps_max"
APEX_STALENESS_MEAN = "apex/staleness_mean"
APEX_STALENESS_MAX = "apex/staleness_max"
APEX_RESTARTS = "apex/actor_restarts"
APEX_ACTORS_SPS = "apex/actors_sps"
APEX_INGEST_PER_S = "apex/replay_ingest_per_s"
APEX_SAMPLES_PER_S = "apex/replay_samples_per_s"
APEX_UPDATES_PER_S = "apex/learner_updates_per_s"
APEX_UPDATES_DROPPED = "apex/priority_updates_dropped"
# One of each per actor: ``apex_actor(APEX_ACTOR_SPS, i)`` is actor i's.
APEX_ACTOR_SPS = "apex/actor_<i>/sps"
APEX_ACTOR_RETURN = "apex/actor_<i>/return"
# The run's final metrics, written once at the end of a finished run; the HParams tab reads them.
SUMMARY_FINAL_RETURN = "summary/final_eval_return_mean"
SUMMARY_AUC = "summary/auc"
SUMMARY_IS_WEIGHT_MEAN = "summary/is_weight_mean"
CONFIG_TEXT = "config"

# Every scalar tag with its one-line meaning (the docs site's tag reference lists them). Values
# "averaged over the log interval" are means over every update since the previous write.
SCALAR_TAGS: dict[str, str] = {
    PER_SAMPLED_PRIORITY: "mean priority of the sampled batches (proportional: p_i^alpha; "
    "rank: |delta|), averaged over the log interval (prioritized memories only)",
    PER_MEAN_PRIORITY: "mean priority over the whole memory, same units as sampled_priority "
    "(prioritized memories only)",
    PER_MAX_PRIORITY: "largest raw priority seen (what a new transition enters with; "
    "prioritized memories only)",
    PER_BETA: "importance-sampling exponent, annealed from replay.beta0 to replay.beta_end (1) "
    "over replay.beta_anneal_steps or the run (prioritized memories only)",
    PER_IS_WEIGHT_MEAN: "mean IS weight of the sampled batches",
    PER_IS_WEIGHT_MIN: "smallest IS weight of the sampled batches",
    PER_IS_WEIGHT_ESS: "effective sample size of a batch's IS weights, (sum w)^2 / sum w^2 / B "
    "(1: all equal)",
    PER_NEVER_REPLAYED: "share of sampled transitions that had never been replayed before",
    PER_SAMPLE_AGE: "mean age in env steps of the sampled transitions",
    PER_PRIORITY_AGE: "mean env steps since the sampled transitions' priorities were last set",
    PER_TREE_DRIFT: "relative gap between the sum tree's root and an exact sum of its leaves "
    "(proportional only, checked every few log points)",
    PER_PRIORITY_RATIO: "sampled_priority / mean_priority at the log point: 1 under uniform "
    "sampling, above 1 when high-priority transitions are drawn more often (prioritized "
    "memories only)",
    TRAIN_LOSS: "IS-weighted TD loss",
    TRAIN_LOSS_UNWEIGHTED: "the same per-sample TD losses, plainly averaged (no IS weights): "
    "equal to train/loss under uniform replay",
    TRAIN_Q_MEAN: "mean Q(s, a) of the sampled batches",
    TRAIN_TD_ERROR_ABS: "mean |delta| of the sampled batches",
    TRAIN_GRAD_NORM: "gradient norm before clipping (only when agent.grad_clip_norm is set)",
    TRAIN_LEARNING_RATE: "the optimiser's step size (only when agent.learning_rate_end anneals it)",
    TRAIN_REDUCIBLE_LOSS: "mean reducible loss of the sampled batches before its clip at 0: the "
    "online loss minus the target net's loss on the same target (relo only, or a "
    "replay.priority_from of reducible_loss)",
    TRAIN_IRREDUCIBLE_LOSS: "mean loss of the target net's Q(s, a) on the same targets, the "
    "part ReLo takes as irreducible (relo only, as above)",
    TRAIN_REDUCIBLE_CLIPPED: "share of the sampled transitions whose reducible loss was <= 0 "
    "and was clipped to 0 (relo only, as above)",
    TRAIN_LARGE_BATCH_TD_MEAN: "mean |delta| over LaBER's large batch, by the current network "
    "(laber only)",
    TRAIN_LARGE_BATCH_TD_STD: "standard deviation of |delta| over LaBER's large batch: the "
    "spread the picks exploit (laber only)",
    TRAIN_PAL_LAMBDA: "PAL's normaliser, the batch mean of max(|delta|, k)^alpha (pal only)",
    TRAIN_PICKED_WEIGHT_MEAN: "mean weight mean(p) / p_i of the samples LaBER picked, the weights "
    "its loss applies; per/is_weight_* are the large batch's, all 1 (laber only)",
    EXPLORE_EPSILON: "exploration epsilon",
    EPISODE_RETURN: "undiscounted return of each finished training episode",
    EPISODE_LENGTH: "length in env steps of each finished training episode",
    EVAL_RETURN_MEAN: "mean return of the evaluation episodes, at train.eval_epsilon (0: "
    "greedy; the last point is the final evaluation)",
    EVAL_RETURN_STD: "standard deviation of those returns",
    EVAL_LENGTH_MEAN: "mean length of those episodes",
    PERF_SPS: "env steps per second of wall time since the previous write, learning included",
    APEX_BLOCKS_PER_S: "blocks of transitions the learner took per second since the previous "
    "write (distributed runs only)",
    APEX_ACTOR_SPS_MIN: "env steps per second of the slowest actor since the previous write, as "
    "its blocks' env steps over the learner's wall time (distributed runs only)",
    APEX_ACTOR_SPS_MAX: "the same, of the fastest actor (distributed runs only)",
    APEX_STALENESS_MEAN: "learner updates between the weights a block's actor played and "
    "computed its priorities with and the learner's on its arrival, averaged over the blocks "
    "since the previous write (distributed runs only)",
    APEX_STALENESS_MAX: "the largest of those since the previous write (distributed runs only)",
    APEX_RESTARTS: "actor processes that died and were restarted so far, their queued blocks "
    "lost (distributed runs only)",
    APEX_ACTORS_SPS: "env steps per second of all actors together since the previous write, "
    "as their blocks' env steps over the learner's wall time (distributed runs only)",
    APEX_INGEST_PER_S: "transitions the replay memory took per second since the previous write "
    "(distributed runs only)",
    APEX_SAMPLES_PER_S: "transitions the learner sampled from the replay memory per second since "
    "the previous write: updates x batch size (distributed runs only)",
    APEX_UPDATES_PER_S: "learner updates (gradient steps) per second since the previous write "
    "(distributed runs only)",
    APEX_UPDATES_DROPPED: "priority updates of transitions overwritten between their draw and "
    "the update's arrival at their replay shard, dropped so far (distributed runs only, with "
    "run.shards)",
    APEX_ACTOR_SPS: "env steps per second of one actor since the previous write, one tag per "
    "actor: apex/actor_0/sps, apex/actor_1/sps, ... (distributed runs only)",
    APEX_ACTOR_RETURN: "mean return of one actor's episodes that ended since the previous "
    "write, played at its own epsilon, one tag per actor: apex/actor_0/return, ... (distributed "
    "runs only; none where none ended)",
    SUMMARY_FINAL_RETURN: "summary.json's final_eval_return_mean, one point at a finished run's "
    "last step (an HParams metric)",
    SUMMARY_AUC: "summary.json's auc, the normalised area under eval/return_mean, one point at a "
    "finished run's last step (an HParams metric)",
    SUMMARY_IS_WEIGHT_MEAN: "summary.json's is_weight_mean, the mean of the logged "
    "per/is_weight_mean, one point at a finished run's last step (1 for uniform replay, whose "
    "weights are all 1, as scores.csv says; an HParams metric)",
}

# The HParams tab's metrics: (scalar tag, the column's name).
HPARAMS_METRICS = (
    (SUMMARY_FINAL_RETURN, "final eval return"),
    (SUMMARY_AUC, "AUC"),
    (SUMMARY_IS_WEIGHT_MEAN, "mean IS weight"),
)

# The Custom Scalars tab's layout: one chart per quantity, each with every run's line (TensorBoard
# colours a chart's lines by run and tells two tags of one run apart only by the marker's shape,
# so sampled and memory-mean priority on one chart read as one line), and the ratio of the two,
# which is the comparison itself: 1 under uniform sampling. Tags are regular expressions there,
# hence the anchors.
CUSTOM_SCALARS_LAYOUT = {
    "PER": {
        "sampled / memory mean priority (1: no prioritisation)": [
            "Multiline", [f"^{PER_PRIORITY_RATIO}$"],
        ],
        "priority of the sampled batches": ["Multiline", [f"^{PER_SAMPLED_PRIORITY}$"]],
        "mean priority of the memory": ["Multiline", [f"^{PER_MEAN_PRIORITY}$"]],
        "IS weights: batch mean": ["Multiline", [f"^{PER_IS_WEIGHT_MEAN}$"]],
    },
    "priority signal": {
        "reducible loss before its clip (relo)": ["Multiline", [f"^{TRAIN_REDUCIBLE_LOSS}$"]],
        "irreducible loss (relo)": ["Multiline", [f"^{TRAIN_IRREDUCIBLE_LOSS}$"]],
        "share clipped to 0 (relo)": ["Multiline", [f"^{TRAIN_REDUCIBLE_CLIPPED}$"]],
        "large batch |delta|: mean (laber)": ["Multiline", [f"^{TRAIN_LARGE_BATCH_TD_MEAN}$"]],
        "large batch |delta|: spread (laber)": ["Multiline", [f"^{TRAIN_LARGE_BATCH_TD_STD}$"]],
        "weights of the picked samples (laber)": [
            "Multiline", [f"^{TRAIN_PICKED_WEIGHT_MEAN}$"],
        ],
    },
    "loss": {
        "TD loss, IS-weighted (what is minimised)": ["Multiline", [f"^{TRAIN_LOSS}$"]],
        "TD loss, unweighted": ["Multiline", [f"^{TRAIN_LOSS_UNWEIGHTED}$"]],
    },
}  # fmt: skip

# Tags only a prioritized memory has.
PRIORITY_TAGS = (PER_SAMPLED_PRIORITY, PER_MEAN_PRIORITY, PER_MAX_PRIORITY)


# The learner's metrics (``LearnResult.metrics``) are logged as ``train/<name>`` and the memory's
# diagnostics (``ReplayMemory.diagnostics``) as ``per/<name>``: the maps below are read off the
# catalogue, so a new metric is one entry in ``SCALAR_TAGS`` (tests/test_metrics.py fails, naming
# it, until it has one).
LEARNER_PREFIX = "train/"
DIAGNOSTIC_PREFIX = "per/"


def _named(prefix: str) -> dict[str, str]:
    return {tag.removeprefix(prefix): tag for tag in SCALAR_TAGS if tag.startswith(prefix)}


LEARNER_TAGS = _named(LEARNER_PREFIX)
DIAGNOSTIC_TAGS = _named(DIAGNOSTIC_PREFIX)


def _tagged(
    values: Mapping[str, float], tags: Mapping[str, str], prefix: str, what: str
) -> dict[str, float]:
    try:
        return {tags[name]: value for name, value in values.items()}
    except KeyError as exc:
        name = exc.args[0]
        raise KeyError(
            f"{what} {name!r} has no TensorBoard tag: add '{prefix}{name}' with its meaning to "
            "SCALAR_TAGS in per_dqn/logs/tags.py"
        ) from None


def apex_actor(tag: str, actor: int) -> str:
    """Actor ``actor``'s own tag of a per-actor ``tag`` (``APEX_ACTOR_SPS``,
    ``APEX_ACTOR_RETURN``)."""
    return tag.replace("<i>", str(actor))


def learner_scalars(metrics: Mapping[str, float]) -> dict[str, float]:
    """The learner's metrics (``LearnResult.metrics``) by tag, in their order.

    Raises:
        KeyError: a metric with no ``train/<name>`` tag in ``SCALAR_TAGS`` (the message names it).
    """
    return _tagged(metrics, LEARNER_TAGS, LEARNER_PREFIX, "learner metric")


def diagnostic_scalars(diagnostics: Mapping[str, float]) -> dict[str, float]:
    """The memory's diagnostics (``ReplayMemory.diagnostics``) by tag, in their order.

    Raises:
        KeyError: a diagnostic with no ``per/<name>`` tag in ``SCALAR_TAGS`` (the message names it).
    """
    return _tagged(diagnostics, DIAGNOSTIC_TAGS, DIAGNOSTIC_PREFIX, "memory diagnostic")
