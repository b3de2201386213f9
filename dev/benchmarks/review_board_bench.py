"""Latency of the review board's page with many pending approvals, identical calls among them.

Run: ``python dev/benchmarks/review_board_bench.py [--pending 100000] [--rounds 5]
[--requests 100]``.
A real aiohttp server over a view holding `--pending` approvals (by default every one the same
call, the worst case for grouping identical calls, plus one page of distinct ones), a signed-in
client, and per round `--requests` requests of each kind: the board, its live poll, its last
page, and the board after one more call is parked before each request (the view changed, so
what is cached per change is built again). Prints the median and p99 of each kind per round,
then over all rounds with the min-max of the rounds' p99.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiohttp import test_utils, web

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.listing import PAGE_SIZE
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings

Http = test_utils.TestClient[web.Request, web.Application]


def record(n: int, *, distinct: bool = False) -> ApprovalRecord:
    customer = f"customer-{n}" if distinct else "acme"
    return ApprovalRecord.model_validate(
        {
            "approval_id": f"appr_{n:07d}",
            "tool": "send_invoice",
            "arguments": {"customer": customer, "amount_cents": 1250},
            "run_id": f"run-{n}",
            "call_id": f"call-{n}",
            "origin": "kafka:bench",
            "source": "kafka",
            "requested_at": f"2024-01-01T{n // 3_600_000 % 24:02d}:{n // 60_000 % 60:02d}:"
            f"{n // 1000 % 60:02d}.{n % 1000:03d}Z",
        }
    )


async def sign_in(client: Http, token: str) -> None:
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    done = await client.post(
        "/login", data={"token": token, "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert done.status == 303, done.status


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(reviewers_file=Path(tmp) / "reviewers.json", broker="127.0.0.1:1")
        view = ApprovalsView(settings)  # never started: records are set directly
        began = time.perf_counter()
        for n in range(args.pending):
            view.records[f"appr_{n:07d}"] = record(n, distinct=n < PAGE_SIZE)
        loaded_s = time.perf_counter() - began
        service = ReviewService(
            view=view,
            decider=Decider(view, DecisionWriter(settings)),
            reviewers=ReviewersFile(settings.reviewers_file),
            sessions=Sessions(b"s" * 32, ttl_s=3600),
        )
        token = service.reviewers.add("bench")
        last = -(-args.pending // PAGE_SIZE)
        kinds = {
            "board": "/",
            "live poll": "/live?since=-1",
            "last page": f"/?page={last}",
            "board after a park": "/",
        }
        print(
            f"Python {platform.python_version()} {platform.machine()}; {args.pending} pending "
            f"({args.pending - PAGE_SIZE} identical); view filled in {loaded_s:.1f} s; "
            f"{args.rounds} rounds x {args.requests} requests per kind"
        )
        times: dict[str, list[list[float]]] = {kind: [] for kind in kinds}
        extra = args.pending
        async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as client:
            await sign_in(client, token)
            for _ in range(args.rounds):
                for kind, path in kinds.items():
                    samples = []
                    for _ in range(args.requests):
                        if kind == "board after a park":
                            view.records[f"appr_{extra:07d}"] = record(extra)
                            extra += 1
                        start = time.perf_counter()
                        response = await client.get(path)
                        await response.read()
                        samples.append((time.perf_counter() - start) * 1000)
                        assert response.status == 200, response.status
                    times[kind].append(samples)
        print(f"{'request':<20} {'median ms':>10} {'p99 ms':>8} {'round p99 min-max ms':>22}")
        for kind, rounds in times.items():
            every = [s for samples in rounds for s in samples]
            lows = [p99(samples) for samples in rounds]
            print(
                f"{kind:<20} {statistics.median(every):>10.1f} {p99(every):>8.1f} "
                f"{min(lows):>10.1f}-{max(lows):.1f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
