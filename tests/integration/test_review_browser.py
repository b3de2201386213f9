"""The review page in a real browser (Playwright driving Debian's Chromium) against a real worker,
broker and `stream-adapter review` process: one test per thing a reviewer relies on.

The tests of this module share one worker and one review service; each works on its own calls
(unique run ids and customers, found with the page's search), so they do not see each other's.
Screenshots go to $STREAM_ADAPTER_SCREENSHOTS (default: a folder in the system's temp dir).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from stream_adapter.core.approvals import fingerprint
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings
from tests.harness import Client, WorkerProcess, latest_record, read_all, unique, wait_for
from tests.integration.review_support import (
    ReviewProcess,
    add_reviewer,
    approve_and_crash,
    ledger_lines,
    park_invoice,
    send_invoice,
)

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get(
        "STREAM_ADAPTER_SCREENSHOTS", Path(tempfile.gettempdir()) / "stream-adapter-screenshots"
    )
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
TIME_FORMAT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
RELATIVE = re.compile(r"^\(\d+ (s|min|h|d) ago\)$")

playwright_api.expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def review(
    shared_settings: Settings,
    shared_worker: WorkerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ReviewProcess, str]]:
    """One review service for the module, and reviewer ann's token."""
    workdir = tmp_path_factory.mktemp("review")
    settings = shared_settings.with_changes(reviewers_file=workdir / "reviewers.json")
    token = add_reviewer(settings, "ann")
    process = ReviewProcess(settings, workdir).start()
    try:
        asyncio.run(process.ready())
        yield process, token
    finally:
        process.kill()


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/browser.sh install`")
    return CHROMIUM


@pytest.fixture
async def browser(chromium: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh Chromium profile (its own user-data-dir); its pages are tabs sharing cookies."""
    async with playwright_api.async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1100, "height": 900},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            await context.close()


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Any:
    """shots(page, name): a full-page screenshot named after the test; returns its path."""
    folder = SCREENSHOTS / "review"
    folder.mkdir(parents=True, exist_ok=True)
    test = request.node.name.removeprefix("test_")[:60]

    async def take(page: Any, name: str) -> Path:
        path = folder / f"{test}--{name}.png"
        await page.screenshot(path=path, full_page=True)
        return path

    return take


async def sign_in(context: Any, review: tuple[ReviewProcess, str], path: str = "/") -> Any:
    """A tab signed in as ann, showing path."""
    process, token = review
    tab = context.pages[0] if context.pages else await context.new_page()
    response = await tab.goto(process.url)
    assert response is not None and response.status == 401
    await tab.get_by_label("Reviewer token").fill(token)
    await tab.get_by_role("button", name="Sign in").click()
    await playwright_api.expect(tab.get_by_text("Signed in as")).to_contain_text("ann")
    if path != "/":
        await tab.goto(process.url.rstrip("/") + path)
    return tab


def card(tab: Any, approval_id: str) -> Any:
    return tab.locator(f'article[data-approval-id="{approval_id}"]')


async def search(tab: Any, text: str) -> None:
    await tab.get_by_label("Search pending approvals and unknown outcomes").fill(text)
    async with tab.expect_navigation():
        await tab.get_by_role("button", name="Search").click()


async def customers_shown(tab: Any) -> set[str]:
    """The customer argument of every approval on the page."""
    cells = tab.locator('article tr[data-argument="customer"] td[data-label="Value"]')
    return {text.strip() for text in await cells.all_inner_texts()}


async def decisions_for(settings: Settings, approval_id: str) -> list[dict[str, Any]]:
    messages = await read_all(settings.bootstrap_servers, settings.decisions_topic)
    return [orjson.loads(m.value) for m in messages if m.key == approval_id.encode()]


def ledger_for(worker: WorkerProcess, call_id: str) -> list[str]:
    return [line for line in ledger_lines(worker.ledger) if f'"{call_id}"' in line]


async def test_a_reviewer_approves_live_and_a_stale_tab_gets_409(
    shared_worker: WorkerProcess,
    shared_client: Client,
    shared_settings: Settings,
    review: tuple[ReviewProcess, str],
    browser: Any,
    shots: Any,
) -> None:
    expect = playwright_api.expect
    process, _ = review
    tab = browser.pages[0] if browser.pages else await browser.new_page()
    assert (await tab.goto(process.url)).status == 401  # every page needs a session
    await expect(tab.get_by_role("heading", level=1)).to_contain_text("sign in")
    await shots(tab, "01-login")
    tab = await sign_in(browser, review)
    customer = unique("Acme GmbH")
    await search(tab, customer)

    # A real send_invoice call through the worker appears without a reload.
    run_id = unique("run")
    approval_id = await park_invoice(shared_client, run_id, customer=customer)
    item = card(tab, approval_id)
    await expect(item).to_be_visible()
    await expect(item.get_by_role("heading")).to_contain_text("send_invoice")
    await expect(item.locator('[data-argument="customer"]')).to_contain_text(f'"{customer}"')
    await expect(tab.locator("#matches")).to_contain_text("1 of")
    await shots(tab, "02-pending")

    # A second tab whose live updates are held back (like a throttled background tab).
    stale = await browser.new_page()
    await stale.route("**/live?**", lambda route: route.abort())
    await stale.goto(process.url + "?q=" + quote(customer))
    stale_item = card(stale, approval_id)
    await expect(stale_item).to_be_visible()

    await item.get_by_label("Reason (optional)").fill("customer confirmed by phone")
    async with tab.expect_navigation():
        await item.get_by_role("button", name="Approve").click()
    await expect(tab.locator("#message")).to_contain_text("Approved")
    assert "q=" in tab.url  # back on the same search
    reply = await shared_client.reply_for(status="ok", approval_id=approval_id)
    assert reply["result"] == {"invoiced": customer, "amount_cents": 1250}
    recent = tab.locator(f'table.recent tr[data-approval-id="{approval_id}"]')
    await expect(recent).to_contain_text("ann")
    await expect(recent).to_contain_text("approved, ran ok")
    await expect(card(tab, approval_id)).to_have_count(0)
    await shots(tab, "03-approved")

    # The stale tab decides the same approval: 409 and a message; nothing is written.
    async with stale.expect_response(lambda r: r.url.endswith("/decision")) as answer:
        await stale_item.get_by_role("button", name="Deny").click()
    assert (await answer.value).status == 409
    alert = stale.get_by_role("alert")
    await expect(alert).to_contain_text("Not decided")
    await expect(alert).to_contain_text("not pending")
    await shots(stale, "04-conflict-409")
    assert len(await decisions_for(shared_settings, approval_id)) == 1
    assert len(ledger_for(shared_worker, f"{run_id}-call")) == 1


async def test_the_tool_is_described_and_its_arguments_shown_against_the_schema(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    customer = unique("Globex")
    approval_id = await park_invoice(
        shared_client, unique("run"), customer=customer, amount_cents=123456
    )
    tab = await sign_in(browser, review, "/?q=" + quote(customer))
    item = card(tab, approval_id)
    await expect(item).to_be_visible()
    await expect(item.locator(".summary")).to_have_text(
        "Send an invoice to a customer (a reviewer approves each one first)."
    )
    table = item.get_by_role("table", name="Arguments of send_invoice")
    customer_row = table.locator('tr[data-argument="customer"]')
    await expect(customer_row.locator('td[data-label="Value"]')).to_contain_text(f'"{customer}"')
    await expect(customer_row.locator('td[data-label="Type"]')).to_have_text("string")
    await expect(customer_row).to_contain_text("Who is billed, as named on the invoice.")
    await expect(customer_row).to_contain_text("(required)")
    amount_row = table.locator('tr[data-argument="amount_cents"]')
    await expect(amount_row.locator('td[data-label="Value"]')).to_contain_text("123456")
    await expect(amount_row.locator('td[data-label="Value"]')).to_contain_text("= 1,234.56")
    await expect(amount_row.locator('td[data-label="Type"]')).to_have_text("integer")
    await expect(amount_row.locator('td[data-label="Unit"]')).to_have_text("cents")
    await expect(table.get_by_role("row")).to_have_count(3)  # the header and two arguments
    await shots(tab, "arguments")


async def test_each_approval_has_a_page_with_its_history_and_a_stable_link(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    process, _ = review
    customer, run_id = unique("Initech"), unique("run")
    approval_id = await park_invoice(
        shared_client, run_id, customer=customer, key=b"agent-7:session-42"
    )
    tab = await sign_in(browser, review, "/?q=" + quote(customer))
    async with tab.expect_navigation():
        await card(tab, approval_id).get_by_role("link", name=approval_id).click()
    link = process.url.rstrip("/") + f"/approvals/{approval_id}"
    assert tab.url == link
    await expect(tab.get_by_label("Link to this approval")).to_have_value(link)
    history = tab.locator("ol.history")
    parked = history.locator('li[data-event="parked"]')
    await expect(parked).to_contain_text(run_id)
    await expect(parked).to_contain_text("agent-7:session-42")
    await expect(parked.locator("time")).to_have_count(1)
    await expect(history.locator('li[data-event="waiting"]')).to_be_visible()
    await shots(tab, "pending")

    await tab.get_by_label("Reason (optional)").fill("second invoice this month is expected")
    async with tab.expect_navigation():
        await tab.get_by_role("button", name="Approve").click()
    assert tab.url.startswith(link + "?")  # back on the approval's own page
    await expect(tab.locator("#message")).to_contain_text("Approved")
    decided = history.locator('li[data-event="decided"]')
    await expect(decided).to_contain_text("Approved by ann")
    await expect(decided).to_contain_text("second invoice this month is expected")
    await expect(decided.locator("time")).to_have_count(1)
    await expect(history.locator('li[data-event="ran"] time')).to_have_count(1)  # live
    outcome = history.locator('li[data-event="outcome"]')
    await expect(outcome).to_contain_text("Finished: ok")
    await expect(outcome).to_contain_text(f'"invoiced": "{customer}"')
    await expect(tab.locator(".badge")).to_have_text("done")
    await shots(tab, "done")

    # The link works as is in another tab of the session, and stays the same.
    other = await browser.new_page()
    response = await other.goto(link)
    assert response is not None and response.status == 200
    await expect(other.locator('li[data-event="outcome"]')).to_contain_text("Finished: ok")
    await expect(other.get_by_role("button", name="Approve")).to_have_count(0)
    missing = await other.goto(process.url.rstrip("/") + "/approvals/appr_nope")
    assert missing is not None and missing.status == 404
    await expect(other.get_by_role("alert")).to_contain_text("No approval")


async def test_identical_pending_calls_are_flagged(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    customer = unique("Umbrella")
    twins = [await park_invoice(shared_client, unique("run"), customer=customer) for _ in range(2)]
    other = await park_invoice(shared_client, unique("run"), customer=customer, amount_cents=99)
    tab = await sign_in(browser, review, "/?q=" + quote(customer))
    for approval_id, twin in (twins, twins[::-1]):
        flag = card(tab, approval_id).locator(".flag")
        await expect(flag).to_contain_text("Identical call")
        await expect(flag).to_contain_text("pending 2 times")
        await expect(flag.get_by_role("link", name=twin)).to_be_visible()
    await expect(card(tab, other)).to_be_visible()
    await expect(card(tab, other).locator(".flag")).to_have_count(0)
    await shots(tab, "flagged")


async def test_recent_decisions_show_reasons_and_every_time_reads_one_way(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    customer = unique("Hooli")
    approval_id = await park_invoice(shared_client, unique("run"), customer=customer)
    tab = await sign_in(browser, review, "/?q=" + quote(customer))
    item = card(tab, approval_id)
    await item.get_by_label("Reason (optional)").fill("duplicate of last week's <invoice>")
    async with tab.expect_navigation():
        await item.get_by_role("button", name="Deny").click()
    await expect(tab.locator("#message")).to_contain_text("Denied")
    row = tab.locator(f'table.recent tr[data-approval-id="{approval_id}"]')
    await expect(row.locator('td[data-label="Reason"]')).to_have_text(
        "duplicate of last week's <invoice>"
    )
    await expect(row.locator('td[data-label="Outcome"]')).to_have_text("denied")
    await expect(row.locator('td[data-label="Reviewer"]')).to_have_text("ann")
    await shots(tab, "recent")

    # One format on every page: the absolute UTC time, and how long ago beside it.
    for path in ("/", f"/approvals/{approval_id}"):
        await tab.goto(review[0].url.rstrip("/") + path)
        times = tab.locator("time")
        assert await times.count() >= 2
        for i in range(await times.count()):
            stamp = times.nth(i)
            assert TIME_FORMAT.match(await stamp.inner_text()), await stamp.inner_text()
            relative = stamp.locator("xpath=following-sibling::span[1]")
            assert RELATIVE.match(await relative.inner_text()), await relative.inner_text()


async def test_search_and_pages_past_fifty_pending(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    prefix = unique("Soylent")
    runs = [unique("run") for _ in range(55)]
    for n, run_id in enumerate(runs):
        await send_invoice(shared_client, run_id, customer=f"{prefix}-{n:02d}", amount_cents=n + 1)

    def all_parked(replies: list[dict[str, Any]]) -> bool:
        parked = {r["run_id"] for r in replies if r.get("status") == "pending_approval"}
        return parked >= set(runs)

    await shared_client.wait_replies(all_parked, timeout_s=60, what="55 parked calls")
    tab = await sign_in(browser, review)
    await search(tab, prefix)
    await expect(tab.locator("#matches")).to_contain_text("55 of")
    await expect(tab.locator("article[data-approval-id]")).to_have_count(50)
    pager = tab.get_by_role("navigation", name="Pages of pending approvals").first
    await expect(pager).to_contain_text("Showing 1\u201350 of 55 (page 1 of 2)")
    first = await customers_shown(tab)
    await shots(tab, "page-1")
    async with tab.expect_navigation():
        await pager.get_by_role("link", name="Next 50").click()
    await expect(tab.locator("article[data-approval-id]")).to_have_count(5)
    await expect(pager).to_contain_text("Showing 51\u201355 of 55 (page 2 of 2)")
    await expect(tab.get_by_label("Search pending approvals and unknown outcomes")).to_have_value(
        prefix
    )
    second = await customers_shown(tab)
    await shots(tab, "page-2")
    assert len(first) == 50 and len(second) == 5
    assert first | second == {f'"{prefix}-{n:02d}"' for n in range(55)}  # each once, none lost
    await search(tab, f"{prefix}-07")
    await expect(tab.locator("article[data-approval-id]")).to_have_count(1)
    await expect(tab.locator("article[data-approval-id]")).to_contain_text(runs[7])


async def test_no_sideways_scrolling_at_390_px(
    shared_client: Client, review: tuple[ReviewProcess, str], browser: Any, shots: Any
) -> None:
    expect = playwright_api.expect
    customer = unique("Very-Long-Customer-Name-Without-Any-Spaces-" * 3)
    run_id = unique("run-" + "x" * 120)
    approval_id = await park_invoice(
        shared_client, run_id, customer=customer, key=b"agent-key-" + b"k" * 150
    )
    tab = await sign_in(browser, review)
    await tab.set_viewport_size({"width": 390, "height": 844})
    for path, name in ((f"/?q={quote(customer)}", "board"), (f"/approvals/{approval_id}", "page")):
        await tab.goto(review[0].url.rstrip("/") + path)
        await expect(tab.get_by_text(run_id).first).to_be_visible()
        width = await tab.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert width[0] <= width[1] == 390, (path, width)
        await shots(tab, name)


class AgentReader:
    """An agent's own reader of tool-replies (librdkafka, read_committed), independent of the
    test client: the final replies of resolved calls must reach it too."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": unique("agent"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe([settings.replies_topic])
        self.replies: list[dict[str, Any]] = []

    async def ok_for(self, call_id: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Every ok reply of call_id, once there is one (polled off the event loop)."""

        async def found() -> list[dict[str, Any]]:
            message = await asyncio.to_thread(self.consumer.poll, 0.5)
            while message is not None:
                assert message.error() is None, message.error()
                self.replies.append(orjson.loads(message.value()))
                message = await asyncio.to_thread(self.consumer.poll, 0)
            return [r for r in self.replies if r.get("call_id") == call_id and r["status"] == "ok"]

        ok: list[dict[str, Any]] = await wait_for(
            found, timeout_s=timeout_s, what=f"an ok reply for {call_id} on tool-replies"
        )
        return ok

    def close(self) -> None:
        self.consumer.close()


async def no_sideways_scrolling(tab: Any) -> None:
    width = await tab.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert width[0] <= width[1], width


async def test_unknown_outcomes_are_resolved_both_ways_and_the_agent_gets_each_final_reply(
    settings: Settings,
    worker_factory: Callable[..., WorkerProcess],
    client: Client,
    browser: Any,
    shots: Any,
    tmp_path: Path,
) -> None:
    """A non-idempotent tool's approved runs end with their worker: two unknown outcomes. A
    reviewer says one ran (with its result) and the other did not (it runs once more)."""
    expect = playwright_api.expect
    ran_id, ran_run, ran_call = await approve_and_crash(worker_factory, client, "first", "acct-a")
    again_id, again_run, again_call = await approve_and_crash(
        worker_factory, client, "second", "acct-b"
    )
    worker = worker_factory(name="third")
    await worker.ready()
    for run_id in (ran_run, again_run):
        unknown = await client.reply_for(run_id=run_id, status="already_done", timeout_s=60)
        assert unknown["outcome"] == "unknown"
    assert ledger_for(worker, ran_call) == ledger_for(worker, again_call) == []

    review_settings = settings.with_changes(reviewers_file=tmp_path / "reviewers.json")
    token = add_reviewer(review_settings, "ann")
    process = ReviewProcess(review_settings, tmp_path / "review").start()
    agent = AgentReader(settings)
    try:
        await process.ready()
        tab = await sign_in(browser, (process, token))
        section = tab.locator('section[aria-labelledby="unknown-h"]')
        await expect(section.get_by_role("heading", level=2)).to_have_text("Outcome unknown (2)")
        ran_card, again_card = card(tab, ran_id), card(tab, again_id)
        await expect(section.locator("article")).to_have_count(2)
        facts = ran_card.locator("dl.facts")
        await expect(facts).to_contain_text(ran_run)
        await expect(facts).to_contain_text(ran_call)
        await expect(facts).to_contain_text(f"kafka:{settings.app_id}@")  # which worker
        started = facts.locator("time").first
        assert TIME_FORMAT.match(await started.inner_text())
        account = ran_card.locator('[data-argument="account"] td[data-label="Value"]')
        await expect(account).to_contain_text('"acct-a"')
        # No pending approval is mixed in, and pending approvals stay a list of their own.
        await expect(tab.locator("#pending-h")).to_have_text("Pending approvals (0)")
        await shots(tab, "01-unknown-desktop")
        await tab.set_viewport_size({"width": 390, "height": 844})
        await no_sideways_scrolling(tab)
        await shots(tab, "02-unknown-390px")
        await tab.set_viewport_size({"width": 1100, "height": 900})

        # "It ran", with the result the reviewer found: the agent gets an ok reply with it.
        await ran_card.get_by_label("Result, if it ran (optional, JSON)").fill(
            '{"wired": "acct-a", "reference": "TX-1"}'
        )
        await ran_card.get_by_label("Reason (optional)").fill("the bank statement shows it")
        async with tab.expect_navigation():
            await ran_card.get_by_role("button", name="It ran").click()
        await expect(tab.locator("#message")).to_contain_text("Resolved: it ran")
        ok = await client.reply_for(run_id=ran_run, status="ok", timeout_s=60)
        assert ok["result"] == {"wired": "acct-a", "reference": "TX-1"}
        assert ok["resolved_by"] == "ann" and ok["approval_id"] == ran_id
        await expect(card(tab, ran_id)).to_have_count(0)  # live: no longer unknown
        await expect(section.get_by_role("heading", level=2)).to_have_text("Outcome unknown (1)")

        # "It did not run", from the approval's own page: it runs once more, fresh.
        async with tab.expect_navigation():
            await again_card.get_by_role("link", name=again_id).click()
        await expect(tab.locator(".badge")).to_have_text("unknown")
        await expect(tab.locator('li[data-event="unknown"]')).to_be_visible()
        await shots(tab, "03-unknown-page")
        async with tab.expect_navigation():
            await tab.get_by_role("button", name="It did not run").click()
        await expect(tab.locator("#message")).to_contain_text("Resolved: it did not run")
        fresh = await client.reply_for(run_id=again_run, status="ok", timeout_s=60)
        assert fresh["result"] == {"wired": "acct-b", "amount_cents": 5}
        history = tab.locator("ol.history")
        await expect(history.locator('li[data-event="resolved"]')).to_contain_text(
            "Resolved by ann: it did not run"
        )
        await expect(history.locator('li[data-event="outcome"]')).to_contain_text("Finished: ok")
        await expect(tab.locator(".badge")).to_have_text("done")
        await expect(tab.get_by_role("button", name="It ran")).to_have_count(0)
        await shots(tab, "04-resolved-page")

        # The agent's own reader sees one final reply each; the tool ran once, the fresh run.
        [reported] = await agent.ok_for(ran_call)
        [ran_again] = await agent.ok_for(again_call)
        assert reported["result"] == ok["result"] and ran_again["result"] == fresh["result"]
        assert ledger_for(worker, ran_call) == []
        assert len(ledger_for(worker, again_call)) == 1
        await tab.goto(process.url)
        await expect(tab.locator("#unknown-h")).to_have_text("Outcome unknown (0)")
        await expect(tab.get_by_text("No approved call has an unknown outcome.")).to_be_visible()
        # Each resolution went through approval-decisions, signed like a decision.
        keys = DecisionKeys.from_settings(settings)
        messages = await read_all(settings.bootstrap_servers, settings.decisions_topic)
        for approval_id, kind in ((ran_id, "ran"), (again_id, "not_run")):
            sent = [
                m for m in messages if m.key == approval_id.encode() and b'"resolution"' in m.value
            ]
            assert len(sent) == 1
            body = orjson.loads(sent[0].value)
            assert (body["resolution"], body["reviewer"]) == (kind, "ann")
            record = await latest_record(settings, approval_id)
            assert record is not None
            # Raises when unsigned, or signed over anything but this value and record.
            keys.verify(sent[0].value, dict(sent[0].headers), binds=fingerprint(record))
    finally:
        agent.close()
        process.kill()
