"""``per-dqn plan``: the replay memory a config asks for, against the available RAM, before
anything is allocated."""

from __future__ import annotations

from typing import Annotated

import typer

from per_dqn import api
from per_dqn.cli.common import ConfigOption, Replay, SetOption, fail, load_or_fail, parse_sets
from per_dqn.config import Override

app = typer.Typer()


@app.command(short_help="Print what the replay memory will take against your RAM.")
def plan(
    config: ConfigOption,
    replay: Annotated[
        Replay | None, typer.Option(help="Replay memory; overrides replay.kind.")
    ] = None,
    set_: SetOption = None,
    pack: Annotated[
        int | None,
        typer.Option(
            help="Also plan a pack of this many such runs in one process (ablate --pack)."
        ),
    ] = None,
) -> None:
    """Print the replay memory's bytes per transition and total against the available RAM.

    Nothing is allocated. Exit 2 if the memory would not fit (`train` refuses the same config),
    or, with --pack K, if K of them would not (`ablate --pack K` refuses the same).
    """
    if pack is not None and pack < 1:
        fail([f"--pack must be >= 1, got {pack}"])
    overrides = parse_sets(set_)
    if replay is not None:
        overrides.append(Override("replay.kind", replay.value, "--replay"))
    cfg, _ = load_or_fail(config, overrides)
    try:
        memory = api.memory_plan(cfg)
    except ValueError as exc:
        fail([f"{config}: {exc}"])
    for line in api.describe_memory_plan(memory, pack):
        typer.echo(line)
    if not memory.fits:
        fail([f"{config}: {memory.refusal()}"])
    from per_dqn.training.memory_plan import same_pack_refusal

    refused = same_pack_refusal(memory, pack) if pack is not None and pack > 1 else None
    if refused is not None:
        fail([f"{config}: {refused}"])
