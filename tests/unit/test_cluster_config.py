"""The local cluster's layout and properties, and the chaos run's choice of cluster faults."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from stream_adapter_dev.broker import cluster
from stream_adapter_dev.chaos.cluster_faults import transactional_id_of
from stream_adapter_dev.chaos.report import longest_gap
from stream_adapter_dev.chaos.scenario import (
    BROKER,
    COORDINATOR_KILL,
    KILL,
    LEADER_KILL,
    ROLLING,
    SCALE_DOWN,
    SCALE_UP,
    ChaosOptions,
    broker_faults,
    fault_plan,
)


def test_nodes_have_their_own_ports_folders_and_one_quorum(tmp_path: Path) -> None:
    config = cluster.ClusterConfig.from_port(tmp_path, 19092)
    nodes = [config.node(n) for n in config.node_ids]
    assert [n.port for n in nodes] == [19092, 19094, 19096]
    assert [n.ctrl_port for n in nodes] == [19093, 19095, 19097]
    assert len({n.home for n in nodes}) == 3 and all(
        n.home.parent == tmp_path / "cluster" for n in nodes
    )
    voters = "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    for node_id, node in zip(config.node_ids, nodes, strict=True):
        assert node.extra["node.id"] == str(node_id)
        assert node.extra["controller.quorum.voters"] == voters
        assert node.extra["offsets.topic.replication.factor"] == "3"
        assert node.extra["transaction.state.log.min.isr"] == "2"
        assert node.extra["min.insync.replicas"] == "2"
        assert node.extra["unclean.leader.election.enable"] == "false"
        assert node.libs == tmp_path / "libs" / "4.4.0"
    assert config.bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    assert config.broker_url.count("kafka://") == 3


def test_extra_properties_win(tmp_path: Path) -> None:
    config = cluster.ClusterConfig.from_port(tmp_path, 19092, extra={"min.insync.replicas": "3"})
    assert config.node(2).extra["min.insync.replicas"] == "3"
    assert config.node(2).extra["node.id"] == "2"


def test_free_ports_are_laid_out_as_from_port(tmp_path: Path) -> None:
    config = cluster.ClusterConfig.on_free_ports(tmp_path)
    first = config.ports[0]
    assert config.ports == (first, first + 2, first + 4)
    assert config.controller_ports == (first + 1, first + 3, first + 5)


def test_cluster_faults_by_guarantee() -> None:
    alo = ChaosOptions(brokers=3)
    eos = ChaosOptions(brokers=3, guarantee="exactly_once")
    assert broker_faults(alo, True) == [LEADER_KILL, ROLLING]
    assert broker_faults(eos, True) == [LEADER_KILL, ROLLING, COORDINATOR_KILL]
    assert broker_faults(ChaosOptions(), True) == [BROKER]
    assert broker_faults(eos, False) == []
    assert broker_faults(ChaosOptions(brokers=3, broker_restart=False), True) == []


def test_fault_plan_keeps_worker_faults_and_orders_scaling() -> None:
    plan = fault_plan(random.Random(1), 2, [LEADER_KILL, ROLLING, COORDINATOR_KILL])
    kinds = [k for _, k in plan]
    assert kinds[0] == SCALE_UP and kinds[-1] == SCALE_DOWN
    assert sorted(kinds[1:-1]) == sorted([KILL, KILL, LEADER_KILL, ROLLING, COORDINATOR_KILL])
    fractions = [f for f, _ in plan]
    assert fractions == sorted(fractions) and fractions[0] > 0 and fractions[-1] < 1
    unscaled = fault_plan(random.Random(1), 0, [LEADER_KILL], scale=False)
    assert [k for _, k in unscaled] == [LEADER_KILL]


def test_longest_gap_within_a_window() -> None:
    arrivals = [1.0, 2.0, 2.5, 9.0, 9.5, 20.0]
    assert longest_gap(arrivals, 0.0, 10.0) == 6.5  # 2.5 -> 9.0
    assert longest_gap(arrivals, 3.0, 9.2) == 6.0  # from the window's start to 9.0
    assert longest_gap(arrivals, 9.5, 12.0) == 2.5  # nothing after 9.5 until the end
    assert longest_gap([], 0.0, 4.0) == 4.0


def test_transactional_id_of_a_transaction_state_key() -> None:
    tid = "chaos-1234-0-3"
    key = struct.pack(">hh", 0, len(tid)) + tid.encode()
    assert transactional_id_of(key) == tid
    assert transactional_id_of(None) is None
    assert transactional_id_of(b"\x00") is None
    assert transactional_id_of(struct.pack(">hh", 0, 50) + b"short") is None
