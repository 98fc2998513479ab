"""Threads that exit when idle: the Parquet reader's pool of read threads, started on
demand and gone after a while without work (an idle reader holds no thread)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class IdlePool:
    """Runs submitted callables on up to ``threads`` threads, started on demand.

    Args:
      threads: The most threads at once.
      idle_s: A thread with no task for this long exits.
      name: The threads' name prefix.
      on_idle: Called (on the exiting thread) when the last thread has exited.
    """

    def __init__(
        self,
        threads: int,
        *,
        idle_s: float,
        name: str,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.max_threads = max(int(threads), 1)
        self.idle_s = idle_s
        self.name = name
        self._on_idle = on_idle
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0  # threads started and not exited
        self._waiting = 0  # of those, waiting for a task

    @property
    def threads(self) -> int:
        """Threads alive now."""
        with self._lock:
            return self._live

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task()`` on a pool thread (exceptions are the task's to handle)."""
        with self._lock:
            self._tasks.put(task)
            if self._tasks.qsize() > self._waiting and self._live < self.max_threads:
                self._live += 1
                threading.Thread(
                    target=self._work, name=f"{self.name}-{self._live}", daemon=True
                ).start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            try:
                task = self._tasks.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    self._waiting -= 1
                    if not self._tasks.empty():
                        continue  # a task came in as the wait ended: run it
                    self._live -= 1
                    last = self._live == 0
                if last and self._on_idle is not None:
                    self._on_idle()
                return
            with self._lock:
                self._waiting -= 1
            task()
            del task
