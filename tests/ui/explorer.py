"""The trace explorer in a real browser (Chromium, headless, driven by Playwright).

Run against a `ctxd serve` that has answered the demo turns:

    python3 tests/ui/explorer.py --base http://127.0.0.1:PORT --key KEY \
        --full TURN --profile-only TURN --blocked TURN --markup TURN --screenshots DIR

or, with `--handle-turn TURN --handle ID --operations N` instead of the demo's turns,
against one that kept an item behind a handle and ran N operations on it.

Exits non-zero with a message on the first expectation that fails. Every console error
and every Content-Security-Policy violation fails the run too.
"""

import argparse
import os
import sys

from playwright.sync_api import expect, sync_playwright

# Generous: the check runs beside the rest of the test suite on a small CI machine.
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)

DEMO_LAYERS = ["policy", "customer-profile", "orders", "open-tickets"]
# A consumer name as a caller may send it: stored as given, so shown as text, never run.
MARKUP = "<img src=x onerror=\"document.title='ran'\"><b>bold</b>"


def arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--full", default=None, help="a full support turn for CUST-1042")
    parser.add_argument("--profile-only", default=None, help="a turn without objective")
    parser.add_argument("--blocked", default=None, help="a turn refused by the pattern")
    parser.add_argument("--markup", default=None, help="a turn whose consumer is MARKUP")
    parser.add_argument("--handle-turn", help="a turn that kept an item behind a handle")
    parser.add_argument("--handle", help="that handle's id")
    parser.add_argument("--operations", type=int, help="how many operations it has")
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    return parser.parse_args()


def watch(page, problems):
    """Console errors and warnings (a CSP violation is one) and uncaught exceptions.
    Chromium also logs each HTTP error answer as "Failed to load resource": the checks
    provoke those (a wrong key, a bad filter, an unknown handle), so they are left out."""

    page.set_default_timeout(TIMEOUT_MS)

    def console(message):
        if message.type in ("error", "warning") and "Failed to load resource" not in message.text:
            problems.append(f"console {message.type}: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))


def open_with_key(page, base, key):
    page.goto(f"{base}/ui/")
    expect(page.get_by_role("heading", name="Tenant API key")).to_be_visible()
    key_field = page.get_by_label("API key", exact=True)
    expect(key_field).to_be_focused()
    key_field.fill(key)
    key_field.press("Enter")
    expect(page.get_by_role("heading", name="Trace search")).to_be_visible()


def no_horizontal_scroll(page, width, what):
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    if scroll_width > width + 1:
        raise AssertionError(f"{what} at {width} px scrolls sideways ({scroll_width} px wide)")


def layer_row(page, layer):
    table = page.get_by_role("table", name="Every layer's decision")
    return table.locator("tbody tr").filter(has=page.locator("td", has_text=layer).first).first


def check_wide(browser, args, shots):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    watch(page, problems)

    # A wrong key is refused, visibly, and the key form stays.
    page.goto(f"{args.base}/ui/")
    page.get_by_label("API key", exact=True).fill("not-the-key")
    page.get_by_role("button", name="Open traces").click()
    alert = page.get_by_role("alert")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("UNAUTHORIZED")
    expect(alert).to_contain_text("The key was refused")
    expect(page.get_by_role("heading", name="Trace search")).to_have_count(0)
    page.screenshot(path=os.path.join(shots, "wrong-key-1280.png"), full_page=True)

    # The right key: search lists the demo turns, newest first.
    key_field = page.get_by_label("API key", exact=True)
    key_field.fill(args.key)
    key_field.press("Enter")
    expect(page.get_by_role("heading", name="Trace search")).to_be_focused()
    expect(page.get_by_role("alert")).to_be_hidden()
    for turn in (args.full, args.profile_only, args.blocked):
        expect(page.get_by_role("link", name=turn)).to_be_visible()
    page.screenshot(path=os.path.join(shots, "search-1280.png"), full_page=True)

    # A stored string with markup is text on the page: no element, nothing run.
    expect(page.get_by_text(MARKUP).first).to_be_visible()
    page.get_by_role("link", name=args.markup).click()
    expect(page.locator(".facts").first).to_contain_text(MARKUP)
    if page.locator("#view img, #view b").count() != 0 or page.title() != "ctxd trace explorer":
        raise AssertionError("a stored string was parsed as HTML")
    page.evaluate("location.hash = '#/search'")
    expect(page.get_by_role("link", name=args.full)).to_be_visible()

    # Filters: the blocked turn is the one whose profile layer is UNAVAILABLE.
    page.get_by_label("Layer", exact=True).fill("customer-profile")
    page.get_by_label("Layer status").select_option("UNAVAILABLE")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name=args.blocked)).to_be_visible()
    expect(page.get_by_role("link", name=args.full)).to_have_count(0)
    expect(page.get_by_label("Layer status")).to_have_value("UNAVAILABLE")
    # A filter the server refuses is shown with the parameter it names.
    page.get_by_role("button", name="Clear").click()
    page.get_by_label("Since (UTC)").fill("yesterday")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("alert")).to_contain_text("since")

    # Cursor paging, one turn a page: every turn once, then no next page.
    page.evaluate("location.hash = '#/search?limit=1'")
    seen = []
    for _ in range(10):
        link = page.locator("#results tbody a").first
        expect(link).to_be_visible()
        seen.append(link.text_content())
        next_page = page.get_by_role("link", name="Next page")
        if next_page.count() == 0:
            break
        next_page.click()
        expect(page.locator("#results tbody a").first).not_to_have_text(seen[-1])
    if len(seen) != len(set(seen)) or not {args.full, args.profile_only, args.blocked} <= set(seen):
        raise AssertionError(f"paging one turn at a time showed {seen}")
    expect(page.get_by_role("link", name="First page")).to_be_visible()

    # A turn: the demo's four layers with their statuses, its providers and timeline.
    page.evaluate("location.hash = '#/search'")
    page.get_by_role("link", name=args.full).click()
    expect(page.get_by_role("heading", name=f"Turn {args.full}")).to_be_focused()
    layers = page.get_by_role("table", name="Every layer's decision").locator("tbody tr")
    expect(layers).to_have_count(4)
    for i, layer in enumerate(DEMO_LAYERS):
        expect(layers.nth(i).locator("td").nth(0)).to_have_text(layer)
        expect(layers.nth(i).locator("td").nth(1)).to_have_text("INCLUDED")
    providers = page.get_by_role("table", name="Every provider the turn reached").locator("tbody tr")
    expect(providers).to_have_count(3)
    for i in range(3):
        expect(providers.nth(i).locator("td").nth(1)).to_have_text("OK")
        expect(providers.nth(i).locator("td").nth(2)).to_have_text("LIVE")
        expect(providers.nth(i).locator("td").nth(3)).to_have_text("sqlite")
    expect(page.locator(".timeline .lane")).to_have_count(3)
    expect(page.locator(".timeline figcaption")).to_contain_text("10000 ms deadline")
    expect(page.locator(".timeline .axis-end")).to_have_text("deadline 10000 ms")
    page.get_by_role("button", name="Scale to the turn").click()
    expect(page.locator(".timeline .axis-end")).to_contain_text("turn ")
    expect(page.get_by_role("button", name="Scale to the deadline")).to_be_focused()
    selections = page.get_by_role("table", name="What was rendered").locator("tbody tr")
    expect(selections).to_have_count(5)
    expect(selections.nth(1)).to_contain_text("customer-data/item-")
    expect(selections.nth(1)).to_contain_text("sha256:")
    expect(page.get_by_text("No budget cuts.")).to_be_visible()
    page.screenshot(path=os.path.join(shots, "turn-1280.png"), full_page=True)

    # The blocked turn: its required profile UNAVAILABLE, the turn blocked by it.
    page.evaluate(f"location.hash = '#/turn/{args.blocked}'")
    expect(page.get_by_role("heading", name=f"Turn {args.blocked}")).to_be_visible()
    expect(layer_row(page, "customer-profile").locator("td").nth(1)).to_have_text("UNAVAILABLE")
    expect(page.locator(".facts").first).to_contain_text("BLOCKED")

    # Replay of the full turn beside the original: orders and tickets cannot be replayed
    # (the demo keeps their digests only). Reached with the keyboard alone.
    page.evaluate(f"location.hash = '#/turn/{args.full}'")
    replay_link = page.get_by_role("link", name="Replay this turn")
    replay_link.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=f"Replay of turn {args.full}")).to_be_focused()
    page.get_by_label("customerId").fill("CUST-9999")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("customerId")
    page.get_by_label("customerId").fill("CUST-1042")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Replay result")).to_be_focused()
    provider_rows = page.get_by_role("table", name="Providers: original and replayed").locator("tbody tr")
    expect(provider_rows).to_have_count(3)
    expect(provider_rows.nth(0)).to_contain_text("EXACT")
    expect(provider_rows.nth(1).locator("td").nth(1)).to_have_text("OK")
    expect(provider_rows.nth(1).locator("td").nth(3)).to_have_text("LIVE_DEPENDENCY_UNAVAILABLE")
    layer_rows = page.get_by_role("table", name="Layers: original and replayed").locator("tbody tr")
    expect(layer_rows.nth(2).locator("td").nth(3)).to_have_text("changed")
    expect(page.locator("pre.rendered")).to_contain_text("## Customer profile [layer customer-profile]")
    page.screenshot(path=os.path.join(shots, "replay-1280.png"), full_page=True)

    # A turn this tenant does not have: the API's 404, shown.
    page.evaluate("location.hash = '#/turn/01a22e00-0000-7000-8000-000000000000'")
    expect(page.get_by_role("alert")).to_contain_text("NOT_FOUND")

    # A handle nobody made: the API's answer, shown.
    handle = page.get_by_label("Handle", exact=True)
    handle.fill("h_" + "0" * 32)
    handle.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("unknown_handle")

    # Every control has a label; tabbing from the top reaches the navigation.
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select')].filter(e => e.labels.length === 0).map(e => e.id)"
    )
    if unlabelled:
        raise AssertionError(f"controls without a label: {unlabelled}")
    page.evaluate("document.activeElement.blur()")
    reached = []
    for _ in range(6):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.textContent.trim() || document.activeElement.id"))
    if "Search traces" not in reached:
        raise AssertionError(f"tabbing from the top reached {reached}")

    # Forgetting the key goes back to the key form.
    page.get_by_role("button", name="Forget key").click()
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    expect(page.get_by_role("link", name="Search traces")).to_be_hidden()

    if problems:
        raise AssertionError("the page reported problems:\n" + "\n".join(problems))
    page.close()


def check_narrow(browser, args, shots):
    page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    problems = []
    watch(page, problems)
    open_with_key(page, args.base, args.key)
    expect(page.get_by_role("link", name=args.full)).to_be_visible()
    no_horizontal_scroll(page, 390, "the search")
    page.screenshot(path=os.path.join(shots, "search-390.png"), full_page=True)
    page.get_by_role("link", name=args.full).click()
    expect(page.get_by_role("heading", name=f"Turn {args.full}")).to_be_visible()
    layers = page.get_by_role("table", name="Every layer's decision").locator("tbody tr")
    expect(layers).to_have_count(4)
    expect(layers.nth(0)).to_be_visible()
    no_horizontal_scroll(page, 390, "a turn")
    page.screenshot(path=os.path.join(shots, "turn-390.png"), full_page=True)
    if problems:
        raise AssertionError("the page reported problems:\n" + "\n".join(problems))
    page.close()


def check_handle(browser, args, shots):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    watch(page, problems)
    open_with_key(page, args.base, args.key)
    page.get_by_role("link", name=args.handle_turn).click()
    selections = page.get_by_role("table", name="What was rendered")
    handle_link = selections.get_by_role("link", name=f"{args.handle} v1")
    expect(handle_link).to_be_visible()
    handle_link.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=f"Handle {args.handle}")).to_be_focused()
    rows = page.get_by_role("table", name="Operations in sequence order").locator("tbody tr")
    expect(rows).to_have_count(args.operations)
    for i in range(args.operations):
        expect(rows.nth(i).locator("td").nth(0)).to_have_text(str(i + 1))
    expect(rows.nth(0).locator("td").nth(2)).to_have_text("metadata")
    expect(rows.nth(0).locator("td").nth(3)).to_have_text("OK")
    page.screenshot(path=os.path.join(shots, "handle-1280.png"), full_page=True)
    if problems:
        raise AssertionError("the page reported problems:\n" + "\n".join(problems))
    page.close()


def main():
    args = arguments()
    os.makedirs(args.screenshots, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=args.chromium,
            # Root in a container: no sandbox; a small /dev/shm: use /tmp.
            args=["--no-sandbox", "--disable-dev-shm-usage"],
            headless=True,
        )
        try:
            if args.handle:
                check_handle(browser, args, args.screenshots)
            else:
                missing = [n for n in ("full", "profile_only", "blocked", "markup") if not getattr(args, n)]
                if missing:
                    raise AssertionError(f"the demo check needs --{', --'.join(missing)}")
                check_wide(browser, args, args.screenshots)
                check_narrow(browser, args, args.screenshots)
        finally:
            browser.close()
    print(f"trace explorer: every check passed; screenshots in {args.screenshots}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as error:
        print(f"trace explorer check failed: {error}", file=sys.stderr)
        sys.exit(1)
