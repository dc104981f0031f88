"""An fsync with a manager keeping the routing table: the SYNC of a server
that still heartbeats (writing back gigabytes, say) is waited for past
io_timeout_ms, as without a manager; a server that stops heartbeating
leaves its chains and the SYNC goes on without it (test_multihost_chains.py
test_a_lost_storage_host_leaves_its_chains_and_returns[freeze-*]).

One cluster of its own: two storage servers of one target, replicas 1, one
manager with a failure timeout (10 s) longer than the test's freeze
(ports PORT_BASE + 1000 .., HTTP PORT_BASE + 8960)."""
import pytest

from conftest import PORT_BASE, chained_cluster, fsync_through_a_freeze


@pytest.fixture(scope="module")
def ms():
    with chained_cluster("msync", PORT_BASE + 1000, PORT_BASE + 8960, 2, 1, 1, managers=1,
                         failure_timeout_ms=10000) as c:
        yield c


def test_fsync_waits_for_a_slow_sync_of_a_server_still_in_its_chains(ms):
    """A server frozen for 3.5 s (past io_timeout_ms, 2 s, within the
    failure timeout) stands in for a slow writeback: the fsync waits and
    succeeds. It used to fail with EIO at the io timeout, since the routing
    table, which a lost server would have changed, never did."""
    fsync_through_a_freeze(ms.mount / "slow-sync", ms.pid("s1"), 3.5)  # a chunk on each server
    assert "s1" in ms.admin("status").stdout
