"""``python -m cloudfit.runtime.torchrun``: torch's ``torchrun`` (same flags) with two of its answers made final.

* **A refusal is final.** A rank that exits 2 refused its input (a checkpoint whose signature does not
  verify, a bad flag, ranks holding different keys): running it again gives the same answer. torchrun
  restarts any failed worker group up to ``--max-restarts`` times (each restart a rendezvous, a model
  build and another refusal); here a group in which any rank exited 2 is not restarted, and torchrun
  exits 2 with one line (the rank's own line is already in the log) instead of its error report and 1.
  Other failures (a rank killed, a crash, a preempted peer) are restarted as before.
* **A signal stop is not a failure.** torchrun's agent forwards SIGTERM/SIGINT to its workers, waits
  for them, then re-raises the signal as an exception: exit 1 and a traceback, even when every rank
  stopped cleanly with its checkpoint written. Here that ends with exit 0 when every worker exited 0 (the
  ranks' stop reason is in the progress file) and 128 + the signal otherwise, in one line either way.

Both work by wrapping two methods of torch's ``LocalElasticAgent`` (``_monitor_workers``, ``_shutdown``);
on a torch without them nothing is wrapped and this is plain torchrun (``PATCHED`` says which).
"""

from __future__ import annotations

import signal
import sys

#: The exit code of a rank that refused its input (``cloudfit.runtime.control.EXIT_BAD_INPUT``).
FINAL_EXIT = 2
PATCHED = False


def _patch() -> bool:
    """Wrap the agent so a worker group with a rank that exited ``FINAL_EXIT`` is not restarted, and the
    workers' exit codes after a signal stop are kept. False (nothing changed) on a torch that lacks the hooks."""
    global PATCHED
    if PATCHED:
        return True
    try:
        from torch.distributed.elastic.agent.server.api import WorkerState
        from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    except ImportError:
        return False
    monitor, shutdown = getattr(LocalElasticAgent, "_monitor_workers", None), getattr(LocalElasticAgent, "_shutdown", None)
    if monitor is None or shutdown is None:
        return False

    def _monitor_workers(self, worker_group):
        result = monitor(self, worker_group)
        failures = getattr(result, "failures", None) or {}
        if result.state == WorkerState.FAILED and any(getattr(f, "exitcode", None) == FINAL_EXIT
                                                      for f in failures.values()):
            if hasattr(self, "_remaining_restarts"):
                self._remaining_restarts = 0  # the refusal would repeat: no restart
        return result

    def _shutdown(self, *args, **kwargs):
        shutdown(self, *args, **kwargs)
        pc = getattr(self, "_pcontext", None)
        try:  # every worker has exited now: keep whether any of them failed
            done = pc._poll() if pc is not None else None
            self._cloudfit_failed = None if done is None else bool(done.failures)
        except Exception:  # noqa: BLE001 - a torch whose process context differs: unknown
            self._cloudfit_failed = None
        global _LAST_SHUTDOWN_FAILED
        _LAST_SHUTDOWN_FAILED = self._cloudfit_failed

    LocalElasticAgent._monitor_workers = _monitor_workers
    LocalElasticAgent._shutdown = _shutdown
    PATCHED = True
    return True


#: After a signal stop: whether any worker exited non-zero (None: not known).
_LAST_SHUTDOWN_FAILED: bool | None = None


def main(argv: list[str] | None = None) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record

    _patch()
    args = torchrun.parse_args(argv)
    try:
        record(torchrun.run)(args)  # as torchrun's own main: other failures keep its error report
    except ChildFailedError as e:
        refused = sorted(r for r, f in e.failures.items() if f.exitcode == FINAL_EXIT)
        if not refused:
            raise
        print(f"torchrun: rank(s) {', '.join(map(str, refused))} exited {FINAL_EXIT} (refused their input; "
              "their line is above): not restarted", file=sys.stderr, flush=True)
        return FINAL_EXIT
    except SignalException as e:
        sig = signal.Signals(e.sigval)
        if _LAST_SHUTDOWN_FAILED is False:
            print(f"torchrun: stopped by {sig.name}; every rank exited 0 (the stop reason is in the progress file)",
                  file=sys.stderr, flush=True)
            return 0
        print(f"torchrun: stopped by {sig.name}; "
              + ("a rank failed while stopping" if _LAST_SHUTDOWN_FAILED else "the ranks' exit is unknown"),
              file=sys.stderr, flush=True)
        return 128 + int(sig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
