"""The engine: Kafka consumption, commits, transactions and tables, on faust-streaming.

The only package that imports faust, mode or aiokafka (enforced by `lint-imports`): the
flows around it use the names below. `App` is a `faust.App`, so a topology's users can add
their own agents, tables and services with Faust's public API. Creating one installs the
engine's patches of Faust (patches.py), which refuse a Faust version they were not written
for. The commit rule lives in commits/.
"""

from stream_adapter.stream.engine.app import App
from stream_adapter.stream.engine.claims import Claim, OwnershipLost, PartitionClaims
from stream_adapter.stream.engine.connection import faust_connection
from stream_adapter.stream.engine.keyed import Slots
from stream_adapter.stream.engine.patches import UnsupportedVersion
from stream_adapter.stream.engine.producer import BatchSender, RecordBatch, Sender, record_size
from stream_adapter.stream.engine.records import Delivery, Headers, Record, message_id_of
from stream_adapter.stream.engine.routes import JobRoute, Lane, LaneLinks, Process
from stream_adapter.stream.engine.stalls import Stall, StallWatch
from stream_adapter.stream.engine.stuck import StuckPartition
from stream_adapter.stream.engine.table import DurableTable

__all__ = [
    "App",
    "BatchSender",
    "Claim",
    "Delivery",
    "DurableTable",
    "Headers",
    "JobRoute",
    "Lane",
    "LaneLinks",
    "OwnershipLost",
    "PartitionClaims",
    "Process",
    "Record",
    "RecordBatch",
    "Sender",
    "Slots",
    "Stall",
    "StallWatch",
    "StuckPartition",
    "UnsupportedVersion",
    "faust_connection",
    "message_id_of",
    "record_size",
]
