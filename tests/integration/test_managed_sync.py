"""An fsync with a manager keeping the routing table: the SYNC of a server
that still heartbeats (writing back gigabytes, say) is waited for past
io_timeout_ms, as without a manager; a server that stops heartbeating
leaves its chains and the SYNC goes on without it (test_multihost_chains.py
test_a_lost_storage_host_leaves_its_chains_and_returns[freeze-*]).

One cluster of its own: two storage servers of one target, replicas 1, one
manager with a failure timeout (10 s) longer than the test's freeze
(ports PORT_BASE + 1000 .., HTTP PORT_BASE + 8960)."""
import os
import signal
import threading
import time

import pytest

from conftest import CHUNK, PORT_BASE, chained_cluster, freeze

HANG = 60


@pytest.fixture(scope="module")
def ms():
    with chained_cluster("msync", PORT_BASE + 1000, PORT_BASE + 8960, 2, 1, 1, managers=1,
                         failure_timeout_ms=10000) as c:
        yield c


def _fsync(fd):
    try:
        os.fsync(fd)
    except OSError as e:
        return e
    return None


def test_fsync_waits_for_a_slow_sync_of_a_server_still_in_its_chains(ms):
    """A server frozen for 3.5 s (past io_timeout_ms, 2 s, within the
    failure timeout) stands in for a slow writeback: the fsync waits and
    succeeds. It used to fail with EIO at the io timeout, since the routing
    table, which a lost server would have changed, never did."""
    path = ms.mount / "slow-sync"
    data = os.urandom(3 * CHUNK)  # a chunk on each server
    pid = ms.pid("s1")
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        outcome = []
        freeze(pid)
        try:
            syncer = threading.Thread(target=lambda: outcome.append(_fsync(f.fileno())))
            syncer.start()
            time.sleep(3.5)  # past io_timeout_ms
            assert syncer.is_alive(), f"fsync came back with the server frozen: {outcome}"
        finally:
            os.kill(pid, signal.SIGCONT)
        syncer.join(HANG)
        assert not syncer.is_alive(), "fsync hung after the server came back"
        assert outcome == [None], outcome
    status = ms.admin("status").stdout
    assert "s1" in status
    assert path.read_bytes() == data
