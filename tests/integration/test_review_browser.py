"""A real browser (Playwright driving Debian's Chromium) signs in, sees a parked call appear live,
approves it, and a stale second tab gets the 409 message. Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stream_adapter.settings import Settings
from tests.harness import ROOT, Client, WorkerProcess, read_all, unique
from tests.integration.review_support import (
    ReviewProcess,
    add_reviewer,
    ledger_lines,
    park_invoice,
)

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "review"
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


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/browser.sh install`")
    return CHROMIUM


@pytest.fixture
async def browser_context(chromium: str, tmp_path: Path) -> AsyncIterator[object]:
    """A fresh Chromium profile (its own user-data-dir); its pages are tabs sharing cookies."""
    async with playwright_api.async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            await context.close()


async def test_reviewer_approves_in_the_browser_and_a_stale_tab_gets_409(
    worker: WorkerProcess,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    browser_context: object,
) -> None:
    expect = playwright_api.expect
    context: playwright_api.BrowserContext = browser_context  # type: ignore[assignment]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    review_settings = settings.with_changes(reviewers_file=tmp_path / "reviewers.json")
    token = add_reviewer(review_settings, "ann")
    review = ReviewProcess(review_settings, tmp_path / "review").start()
    try:
        await review.ready()

        # Sign in: without a session every page is the login form, answered 401.
        tab = context.pages[0] if context.pages else await context.new_page()
        response = await tab.goto(review.url)
        assert response is not None and response.status == 401
        await expect(tab.get_by_role("heading", level=1)).to_contain_text("sign in")
        await tab.get_by_label("Reviewer token").fill(token)
        await tab.screenshot(path=ARTIFACTS / "01-login.png", full_page=True)
        await tab.get_by_role("button", name="Sign in").click()
        await expect(tab.get_by_role("heading", name="Approvals review")).to_be_visible()
        await expect(tab.get_by_text("Signed in as")).to_contain_text("ann")

        # A real send_invoice call through the worker appears without a reload.
        approval_id = await park_invoice(client, unique("run"), customer="Acme GmbH")
        item = tab.locator(f'article[data-approval-id="{approval_id}"]')
        await expect(item).to_be_visible()
        await expect(item.get_by_role("heading")).to_contain_text("send_invoice")
        await expect(item.locator("pre")).to_contain_text('"customer": "Acme GmbH"')
        await expect(item.locator("pre")).to_contain_text('"amount_cents": 1250')
        await expect(item).to_contain_text(approval_id)
        await expect(tab.locator("#live-status")).to_have_text("1 pending approval")
        await tab.screenshot(path=ARTIFACTS / "02-pending.png", full_page=True)

        # A second tab of the same session whose live updates are held back (a stale view,
        # like a throttled background tab's): it still shows the approval as pending.
        stale = await context.new_page()
        await stale.route("**/live?**", lambda route: route.abort())
        await stale.goto(review.url)
        stale_item = stale.locator(f'article[data-approval-id="{approval_id}"]')
        await expect(stale_item).to_be_visible()

        # Approve in the first tab.
        await item.get_by_label("Reason (optional)").fill("customer confirmed by phone")
        async with tab.expect_navigation():
            await item.get_by_role("button", name="Approve").click()
        await expect(tab.locator("#message")).to_contain_text("Approved")
        reply = await client.reply_for(status="ok", approval_id=approval_id)
        assert reply["result"] == {"invoiced": "Acme GmbH", "amount_cents": 1250}
        assert len(ledger_lines(worker.ledger)) == 1
        recent = tab.get_by_role("table").locator("tr", has_text=approval_id)
        await expect(recent).to_contain_text("ann")
        await expect(recent).to_contain_text("approved, ran ok")
        await expect(tab.locator(f'article[data-approval-id="{approval_id}"]')).to_have_count(0)
        await tab.screenshot(path=ARTIFACTS / "03-approved.png", full_page=True)

        # The stale tab decides the same approval: 409 and a message; nothing is written.
        async with stale.expect_response(lambda r: r.url.endswith("/decision")) as answer:
            await stale_item.get_by_role("button", name="Deny").click()
        assert (await answer.value).status == 409
        alert = stale.get_by_role("alert")
        await expect(alert).to_contain_text("Not decided")
        await expect(alert).to_contain_text("not pending")
        await stale.screenshot(path=ARTIFACTS / "04-conflict-409.png", full_page=True)

        decisions = await read_all(settings.bootstrap_servers, settings.decisions_topic)
        assert len(decisions) == 1
        assert len(ledger_lines(worker.ledger)) == 1
        assert len(client.replies_for(approval_id=approval_id, status="ok")) == 1
    finally:
        review.kill()
