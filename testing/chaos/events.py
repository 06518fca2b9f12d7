"""The strikes of a chaos run beyond instance kills, broker crashes, power losses and
request faults (run.py): a clean broker restart, a broker hang, and the zombie (an
instance paused, replaced, then resumed beside its replacement). Each writes one
timeline event whose kind (the text before ":") is counted in the report.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported by the command line's parser: kept light)
    import random

    from ..broker_process import BrokerProcess
    from .supervisor import Instances

# A zombie stays paused this long (its replacement starts and takes over), then runs
# beside the replacement this long before it is killed. Shorter than the sample
# pipeline's transaction.timeout.ms (10 s): a correct pipeline's zombie must be fenced
# by its replacement, not saved by a timeout.
ZOMBIE_PAUSE_S = 3.0
ZOMBIE_LIFE_S = 3.0
# Hangs short enough that clients with default timeouts just wait (their retry paths
# under a hang: tests/integration/faults/test_broker_hang.py).
HANG_MS = (300, 1500)
COUNTED = ("clean restart", "broker hang", "instance pause", "zombie", "zombie exit",
           "zombie kill")
# Which strikes a run draws from, with their weights (run.py's _strike).
WEIGHTS = {"kill": 3, "crash": 1, "power": 1, "fault": 2, "restart": 1, "hang": 1,
           "zombie": 1}

Event = Callable[[str], None]


def strikes(*, instance_kills: bool = True, broker_crashes: bool = True,
            power_loss: bool = True, faults: bool = True, clean_restarts: bool = True,
            hangs: bool = True, zombies: bool = True) -> list[str]:
    """The strikes to draw from, each repeated by its weight."""
    on = {"kill": instance_kills, "crash": broker_crashes, "power": power_loss,
          "fault": faults, "restart": clean_restarts, "hang": hangs, "zombie": zombies}
    return [what for what, weight in WEIGHTS.items() if on[what] for _ in range(weight)]


def clean_restart(broker: BrokerProcess, event: Event) -> None:
    """SIGTERM (in-flight requests answered, logs flushed), wait for the exit, start."""
    started = time.monotonic()
    code = broker.terminate(60)
    took = time.monotonic() - started
    broker.start()
    event(f"clean restart: SIGTERM, exited with {code} after {took:.1f}s, started again")


def hang(rng: random.Random, broker: BrokerProcess, event: Event) -> None:
    """The broker answers nothing for a short while (a GC pause)."""
    ms = rng.randint(*HANG_MS)
    try:
        broker.faults.add(broker="hang", ms=ms)
        event(f"broker hang: nothing answered for {ms} ms")
    except (RuntimeError, OSError) as e:  # the broker went down meanwhile
        event(f"broker hang: not installed ({e})")


def pause(rng: random.Random, pipeline: Instances, event: Event) -> None:
    """SIGSTOP an instance and start its replacement; the paused one comes back as a
    zombie (tend)."""
    instance = rng.randrange(pipeline.count)
    pid = pipeline.pause(instance, ZOMBIE_PAUSE_S, ZOMBIE_LIFE_S)
    if pid is None:
        event(f"instance pause skipped: instance {instance} is not running (it is "
              f"restarted)")
    else:
        event(f"instance pause: SIGSTOP instance {instance} (process {pid}), a replacement "
              f"started; SIGCONT in {ZOMBIE_PAUSE_S:.0f}s")


def tend(pipeline: Instances, event: Event) -> None:
    """Resume and kill the zombies that are due."""
    for text in pipeline.tend_zombies():
        event(text)


def sleep(seconds: float, pipeline: Instances, event: Event) -> None:
    """Sleep ``seconds``, resuming and killing zombies when they are due."""
    until = time.monotonic() + seconds
    while (now := time.monotonic()) < until:
        due = pipeline.next_due()
        time.sleep(max(min(until, due if due is not None else until) - now, 0))
        tend(pipeline, event)


def add_options(parser: argparse.ArgumentParser) -> None:
    """``txbroker chaos``'s switches for these strikes."""
    parser.add_argument("--no-instance-kills", action="store_true",
                        help="no SIGKILLed pipeline instances")
    parser.add_argument("--no-clean-restarts", action="store_true",
                        help="no clean broker restarts (SIGTERM, then start)")
    parser.add_argument("--no-hangs", action="store_true",
                        help="no broker hangs (nothing answered for 0.3-1.5 s)")
    parser.add_argument("--no-zombies", action="store_true",
                        help="no zombies (an instance SIGSTOPped, replaced, then resumed "
                             "beside its replacement)")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """run()'s keyword arguments from add_options's switches."""
    return {"instance_kills": not args.no_instance_kills,
            "clean_restarts": not args.no_clean_restarts, "hangs": not args.no_hangs,
            "zombies": not args.no_zombies}
