"""A broker outage, as an operator sees it: a real worker, the review service and a waiting
`stream-adapter call` on a broker of the test's own, the broker killed for 30 s and started
again on the same data and ports. Each says so in a handful of lines (its own state lines,
the clients' first line, summaries) instead of ~70 client lines a second; the worker's
/health and metrics follow; a call sent afterwards is answered."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from stream_adapter.kafka.connectivity import BrokerWatch, probe
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker import local, secure
from tests.harness import (
    Client,
    CliProcess,
    WorkerProcess,
    make_settings,
    settings_from_env,
    wait_for,
)
from tests.integration.review_support import ReviewProcess

pytestmark = [
    pytest.mark.skipif(not local.shutil.which("java"), reason="the local broker needs Java"),
    pytest.mark.timeout(300),
]

OUTAGE_S = 30.0
HANDFUL = 10
"""Lines at INFO and above from the outage's start to the reachable-again line, all loggers."""

LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+) (.*)$")


def log_lines(text: str) -> list[tuple[str, str, str]]:
    """(level, logger, message) of each record at INFO and above in a worker's text log."""
    found = (LINE.match(line) for line in text.splitlines())
    return [(m[1], m[2], m[3]) for m in found if m is not None and m[1] != "DEBUG"]


@dataclass
class CallProcess(CliProcess):
    """`stream-adapter call` of a confirm tool, waiting for a decision nobody makes."""

    command: ClassVar[str] = "call"
    ready_line: ClassVar[str] = "pending approval"
    args: tuple[str, ...] = ("send_invoice", '{"customer": "acme", "amount_cents": 1}')


def outage_lines(text: str) -> list[tuple[str, str, str]]:
    """The records at INFO and above up to the reachable-again line (all when there is none)."""
    lines = log_lines(text)
    ends = [i for i, line in enumerate(lines) if "reachable again" in line[2]]
    return lines[: ends[0] + 1] if ends else lines


def health(worker: WorkerProcess) -> str:
    url = f"http://127.0.0.1:{worker.settings.web_port}/health"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def broker_up(worker: WorkerProcess) -> float:
    return worker.metrics()[("stream_adapter_broker_up", ())]


async def test_a_broker_outage_says_so_once_and_calls_are_answered_after(
    own_broker: local.BrokerConfig, tmp_path: Path
) -> None:
    settings = make_settings(local.start(own_broker), tmp_path)
    await create_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "work").start()
    review = ReviewProcess(settings, tmp_path / "review").start()
    call = CallProcess(settings, tmp_path / "call", args=(*CallProcess.args, "--wait", "300"))
    try:
        await worker.ready()
        await review.ready()
        await call.start().ready()
        assert health(worker) == "ok\n" and broker_up(worker) == 1
        mark = len(worker.log_text())
        review_mark = len(review.log_text())
        local.stop(own_broker, kill=True)
        down_at = time.monotonic()
        await wait_for(
            lambda: "broker unreachable since" in health(worker),
            timeout_s=OUTAGE_S,
            what="/health to say the broker is unreachable",
        )
        assert broker_up(worker) == 0
        assert worker.metrics()[("stream_adapter_broker_outage_seconds", ())] > 0
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        assert "broker unreachable since" in health(worker)  # still, as the outage lasts
        assert local.start(own_broker) == settings.bootstrap_servers  # same data, same ports

        await wait_for(
            lambda: "broker reachable again after" in worker.log_text()[mark:],
            timeout_s=90,
            what="the worker to say the broker is reachable again",
        )
        assert health(worker) == "ok\n" and broker_up(worker) == 1
        async with Client(settings) as client:
            sent = await client.call("add", {"a": 1, "b": 41})
            reply = await client.reply_for(call_id=sent.call_id, timeout_s=60)
        assert reply["status"] == "ok" and reply["result"] == 42

        outage = outage_lines(worker.log_text()[mark:])
        ours = [m for _, name, m in outage if name == "stream_adapter"]
        clients = [m for _, name, m in outage if name.startswith("aiokafka")]
        print(f"{len(outage)} lines at INFO+ ({len(ours)} ours, {len(clients)} the clients'):")
        print("\n".join(" ".join(line) for line in outage))
        assert len(outage) <= HANDFUL, outage
        assert len(clients) <= 4, clients
        unreachable = [m for m in ours if m.startswith("broker unreachable")]
        assert len(unreachable) == 1, ours
        assert f"servers={settings.bootstrap_servers}" in unreachable[0]
        assert "error_kind=" in unreachable[0]
        back = [m for m in ours if m.startswith("broker reachable again after")]
        assert len(back) == 1, ours
        seconds = int(back[0].split("after ", 1)[1].split(" s", 1)[0])
        assert OUTAGE_S <= seconds < OUTAGE_S + 90
        suppressed = [m for m in ours if m.startswith("suppressed ")]
        assert suppressed and all("Kafka client lines" in m for m in suppressed), ours

        # The review service: the same two state lines, and no flood.
        await wait_for(
            lambda: "broker reachable again after" in review.log_text()[review_mark:],
            timeout_s=60,
            what="the review service to say the broker is reachable again",
        )
        served = outage_lines(review.log_text()[review_mark:])
        print("review service:\n" + "\n".join(" ".join(line) for line in served))
        assert len(served) <= HANDFUL, served
        assert sum(m.startswith("broker unreachable") for _, _, m in served) == 1, served
        # `call`, still waiting for its decision: one line each way on stderr.
        await wait_for(
            lambda: "broker reachable again after" in call.log_text(),
            timeout_s=60,
            what="`call` to say the broker is reachable again",
        )
        said = [line for line in call.log_text().splitlines() if "broker" in line]
        print("call:\n" + "\n".join(said))
        assert len(said) == 2, said
        assert said[0].startswith(f"broker unreachable ({settings.bootstrap_servers}: "), said
    finally:
        call.kill()
        review.kill()
        worker.kill()


async def test_the_probe_connects_as_the_clients_do(
    secure_broker: secure.SecureBroker, tmp_path: Path
) -> None:
    """A cluster with TLS and SASL answers the probe (else a worker would see an outage that is
    not there); refused credentials are an error kind, never the password."""
    base = make_settings(secure_broker.bootstrap, tmp_path)
    await probe(settings_from_env(secure_broker.sasl_env("admin"), base))
    await probe(settings_from_env(secure_broker.sasl_env("admin", "PLAIN"), base))
    await probe(settings_from_env(secure_broker.mtls_env("admin"), base))
    env = {**secure_broker.sasl_env("admin"), "STREAM_ADAPTER_SASL_PASSWORD": "not-the-password"}
    refused = BrokerWatch.for_settings(settings_from_env(env, base))
    await refused.check()
    status = refused.status()
    assert not status.reachable and status.error_kind == "SaslAuthenticationFailed", status
    assert "not-the-password" not in repr(status)
