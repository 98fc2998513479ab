"""Minibatching across hosts: `AllReduce`, the hosts' agreement on each batch's
minibatch split. `tfinput.sparsecore` is the public API.

jax-tpu-embedding keys each batch's all-reduce by its batch number, and a number may be
used once per interface: a second check-in for a completed number aborts the process (a
C++ check), and one that no other host makes waits for ever. `AllReduce` hands each feed
a range of numbers of its own, and a feed that stops finishes the batches every host
may have started (`SparseCoreFeed.close`), so that the hosts spend the same numbers.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tfinput._src.applications.sparsecore.stacks import embedding_module
from tfinput._src.core.errors import ConfigError

log = logging.getLogger("tfinput")

#: jax-tpu-embedding's sync keys are ``2 * number + 1`` in a C++ int.
_MOST = 2**30 - 1


class AllReduce:
    """jax-tpu-embedding's all-reduce across hosts, for `sparsecore_feed` with
    ``SparseCorePlan(minibatching=True)`` on several hosts: before splitting a batch into
    minibatches, the hosts agree whether any needs to, and on the split.

    Make it with `AllReduce.start` on every host (or wrap an ``AllReduceInterface`` you
    made with ``embedding.get_all_reduce_interface``), once per process, and hand it to
    every feed of the run. Feeds take its numbers in turn (one feed at a time): every
    host must run the same feeds, stopping them at the same batch, as a training loop in
    lockstep does.

    Attributes:
      interface: jax-tpu-embedding's ``AllReduceInterface``.
    """

    def __init__(self, interface: Any) -> None:
        if interface is None:
            raise ConfigError("AllReduce: interface is None")
        self.interface = interface
        self._next = 0
        self._busy = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AllReduce(next={self._next}, busy={self._busy})"

    @classmethod
    def start(
        cls,
        peers: list[str],
        port: int,
        *,
        host_id: int | None = None,
        host_count: int | None = None,
    ) -> AllReduce:
        """Start this host's end: jax-tpu-embedding's ``MinibatchingNode``, a gRPC
        server on ``port`` that the other hosts' ends call, and channels to theirs.

        The server listens on every interface of this host (``[::]:port``) without
        authentication or encryption: jax-tpu-embedding has no option for either. Keep
        the port closed to everything but the other hosts (docs/sparsecore.md).

        Start it on every host before any feed preprocesses a batch (a barrier after,
        such as ``multihost_utils.sync_global_devices``): a call to a host whose end
        has not started yet fails at once.

        Args:
          peers: The other hosts' ends, ``"host:port"`` (not this host's).
          port: The port this host's end listens on.
          host_id, host_count: This host's index and the number of hosts (default:
            ``jax.process_index()`` and ``jax.process_count()``).

        Raises:
          ConfigError: jax-tpu-embedding is missing; ``peers`` is not one fewer than
            ``host_count``.
        """
        embedding = embedding_module()
        if host_count is not None and len(peers) != host_count - 1:
            raise ConfigError(
                f"AllReduce.start: {len(peers)} peer(s) for {host_count} hosts; give every "
                "other host's end, and not this host's"
            )
        interface = embedding.get_all_reduce_interface(
            peer_addresses=list(peers),
            minibatching_port=port,
            host_id=host_id,
            host_count=host_count,
        )
        log.warning(
            "tfinput: the minibatching all-reduce listens on port %d of every interface of "
            "this host, without authentication (jax-tpu-embedding's gRPC server): keep it "
            "closed to all but the other hosts",
            port,
        )
        return cls(interface)

    def take(self) -> int:
        """The first number of a feed's range (the feed numbers its batches on from it);
        `give_back` ends the range.

        Raises:
          ConfigError: another feed holds a range (one feed at a time per AllReduce).
        """
        with self._lock:
            if self._busy:
                raise ConfigError(
                    "sparsecore_feed: another feed is using this AllReduce; close it first "
                    "(the hosts must spend the same batch numbers, one feed after the other)"
                )
            self._busy = True
            return self._next

    def give_back(self, used: int) -> None:
        """End a feed's range: its first ``used`` numbers were spent (on every host)."""
        with self._lock:
            self._next += used
            self._busy = False

    @staticmethod
    def check(number: int) -> int:
        """``number`` if jax-tpu-embedding can key an all-reduce with it."""
        if number > _MOST:
            raise ConfigError(
                f"AllReduce: batch number {number} is beyond what jax-tpu-embedding's "
                f"all-reduce keys hold ({_MOST}); start a new AllReduce (a new port)"
            )
        return number
