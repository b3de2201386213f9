"""`bench --state` writes approval records byte for byte as the worker parks them."""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter.core.approvals import ApprovalRecord, new_record
from stream_adapter.core.envelope import Envelope
from stream_adapter.core.ids import kafka_message_id
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.settings import Settings
from stream_adapter_dev.bench.state import TOOL, _key_per_partition, parked, record_template


def test_a_parked_record_is_what_the_worker_stores(tmp_path: Path) -> None:
    settings = Settings(app_id="bench-state", data_dir=str(tmp_path))
    template = record_template(settings)
    key, call, approval_id, value = parked(template, settings, 12345)
    envelope = orjson.loads(call)
    expected = new_record(
        Envelope(
            tool=TOOL,
            arguments=envelope["arguments"],
            run_id=envelope["run_id"],
            call_id=envelope["call_id"],
            approval_id=None,
            message_id=kafka_message_id(settings.calls_topic, 0, 12345),
            source="kafka",
        ),
        TOOL,
        origin=f"kafka:{settings.app_id}",
        now=template["requested_at"],
        agent_key=key,
    )
    assert value == expected.to_bytes()
    assert ApprovalRecord.from_bytes(value).approval_id == approval_id.decode()
    assert key == envelope["run_id"].encode()


def test_one_probe_key_per_partition() -> None:
    keys = _key_per_partition(8)
    assert [partition_for(key, 8) for key in keys] == list(range(8))
