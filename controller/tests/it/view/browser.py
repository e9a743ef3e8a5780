"""Drives `harness view` in Debian's Chromium through Playwright (tests/it/view.rs runs it).

argv[1] is a JSON file the Rust test wrote: the viewer's address, the runs it made, the
workspace `harness replay restore` wrote at a middle step, the hostile strings, and the files
that release the live batch's tasks. Prints one line per check; exits 1 on the first failure.
"""

import json
import pathlib
import sys
import time

from playwright.sync_api import sync_playwright

CONFIG = json.loads(pathlib.Path(sys.argv[1]).read_text())
BASE = CONFIG["base"]
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def url(route, **params):
    from urllib.parse import urlencode

    pairs = []
    for key, value in params.items():
        for one in value if isinstance(value, list) else [value]:
            pairs.append((key, str(one)))
    return f"{BASE}#/{route}" + (f"?{urlencode(pairs)}" if pairs else "")


def states(page):
    return page.eval_on_selector_all(
        "[data-testid=cell]", "cells => cells.map(c => [c.dataset.task, c.dataset.state])"
    )


def runs_list(page):
    page.goto(url(""))
    page.wait_for_selector("[data-testid=run-row]")
    ids = page.eval_on_selector_all("[data-testid=run-row]", "rows => rows.map(r => r.dataset.id)")
    check(CONFIG["batch_a"] in ids and CONFIG["batch_b"] in ids, f"the runs list shows both batches: {ids}")
    # Long paths and scripted models wrap: the list fits the window, with no sideways scroll.
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    check(wide[0] <= wide[1], f"the runs list fits the window (scroll width, window): {wide}")
    page.fill("[data-testid=filter]", "batch-b")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=run-row]')].every(r => r.dataset.id.includes('batch-b'))"
    )
    # Still so after the list's own refresh.
    page.wait_for_timeout(1500)
    ids = page.eval_on_selector_all("[data-testid=run-row]", "rows => rows.map(r => r.dataset.id)")
    check(ids == [CONFIG["batch_b"]], f"the filter keeps the runs it matches: {ids}")


def search(page):
    page.fill("[data-testid=search]", CONFIG["search"])
    page.press("[data-testid=search]", "Enter")
    page.wait_for_selector("[data-testid=hit]")
    hits = page.eval_on_selector_all(
        "[data-testid=hit]", "hits => hits.map(h => [h.dataset.what, h.dataset.run])"
    )
    check([CONFIG["search_what"], CONFIG["search_run"]] in hits, f"a search hit: {hits}")


def hostile(page):
    page.goto(url("run", id=CONFIG["session"]))
    page.wait_for_selector("[data-testid=event]")
    body = page.inner_text("main")
    check(CONFIG["hostile"] in body, "the hostile prompt is shown as text")
    page.goto(url("run", id=CONFIG["session"], tab="workspace", step=CONFIG["final_step"]))
    page.wait_for_selector("[data-testid=ws-entry]")
    paths = page.eval_on_selector_all("[data-testid=ws-entry]", "e => e.map(x => x.dataset.path)")
    check(CONFIG["hostile_file"] in paths, "the hostile file name is listed as text")
    pwned = page.evaluate("() => window.__pwned === undefined && document.querySelectorAll('img[src=x]').length === 0")
    check(pwned, "no hostile markup ran or became an element")


def crafted(page):
    page.goto(url("run", id=CONFIG["crafted"]))
    page.wait_for_selector("[data-testid=event][data-type=unreadable]")
    kinds = page.eval_on_selector_all("[data-testid=event]", "e => e.map(x => x.dataset.type)")
    check(
        "session_finished" in kinds and kinds[-1] == "unreadable",
        f"a line whose fields have the wrong types is shown as text, the others as events: {kinds}",
    )


def children(page):
    page.goto(url("run", id=CONFIG["session"]))
    page.wait_for_selector("[data-testid=child]")
    fork = page.eval_on_selector("[data-testid=child]", "c => c.dataset.id")
    check(fork.startswith(CONFIG["session"] + "/forks/"), f"the session lists its fork: {fork}")
    page.click("[data-testid=child] a")
    page.wait_for_selector("[data-testid=grid-row]")
    rows = page.eval_on_selector_all(
        "[data-testid=grid-row]", "r => r.map(x => [x.dataset.task, x.querySelectorAll('[data-testid=cell]').length])"
    )
    check(len(rows) == 1 and rows[0][1] == 2, f"the fork's children are one task's two trials: {rows}")


def batch_page(page):
    page.goto(url("run", id=CONFIG["batch_a"]))
    page.wait_for_selector("[data-testid=cell]")
    cells = dict(states(page))
    check(cells == {"alpha": "passed", "beta": "failed"}, f"the batch grid: {cells}")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=chart]')].every(i => i.complete && i.naturalWidth > 0)"
    )
    charts = page.eval_on_selector_all("[data-testid=chart]", "i => i.map(x => x.alt)")
    check("tool-latency chart" in charts and len(charts) == 6, f"the batch's charts are drawn: {charts}")


def workspace(page):
    step = CONFIG["middle_step"]
    page.goto(url("run", id=CONFIG["session"], tab="workspace", step=step))
    page.wait_for_selector(f"[data-testid=ws-tree][data-step='{step}']")
    entries = page.eval_on_selector_all(
        "[data-testid=ws-entry]",
        "e => e.filter(x => x.dataset.change !== 'deleted').map(x => [x.dataset.path, x.dataset.kind])",
    )
    expected = sorted([path, entry["kind"]] for path, entry in CONFIG["restored"].items())
    check(sorted(entries) == expected, f"the tree at step {step} is the restored one: {sorted(entries)} vs {expected}")
    for path, entry in CONFIG["restored"].items():
        if entry["kind"] != "file":
            continue
        page.click(f"[data-testid=ws-entry][data-path='{path}']")
        page.wait_for_function(
            "p => { const h = document.querySelector('[data-testid=ws-path]'); return h && h.textContent === p; }",
            arg=path,
        )
        content = page.inner_text("[data-testid=ws-content]") if page.query_selector("[data-testid=ws-content]") else None
        # inner_text drops a final newline the file has.
        check(content is not None and content.rstrip("\n") == entry["content"].rstrip("\n"), f"{path} at step {step} is the restored content")
    check(page.is_hidden("[data-testid=ws-more]"), "a small tree is one page")
    page.click("[data-testid=ws-changed]")
    page.wait_for_selector("[data-testid=ws-changed]:has-text('show every entry')")
    changes = page.eval_on_selector_all("[data-testid=ws-entry]", "e => e.map(x => x.dataset.change)")
    check(len(changes) > 0 and all(changes), f"only what changed is listed: {changes}")


def compare(page):
    page.goto(url("compare", id=[CONFIG["batch_a"], CONFIG["batch_b"]]))
    page.wait_for_selector("[data-testid=compare-row]")
    flips = dict(
        page.eval_on_selector_all("[data-testid=compare-row]", "r => r.map(x => [x.dataset.task, x.dataset.flip])")
    )
    check(flips == CONFIG["flips"], f"the compare grid marks the flips: {flips}")
    paired = page.inner_text("[data-testid=paired]")
    check("fixed" in paired and "sign test p" in paired, "the paired statistics are shown")
    page.click(f"[data-testid=compare-row][data-task='{CONFIG['diverging_task']}'] [data-testid=align]")
    page.wait_for_selector("[data-testid=divergence]")
    summary = page.inner_text("[data-testid=divergence-summary]")
    check(f"step {CONFIG['divergence_step']}:" in summary, f"the first divergence is marked: {summary}")


def live(page):
    deadline = time.time() + 60
    while time.time() < deadline:
        runs = page.request.get(f"{BASE}api/runs?kind=batch").json()["runs"]
        if any(r["id"] == CONFIG["live_batch"] and r["status"] == "running" for r in runs):
            break
        time.sleep(0.2)
    else:
        check(False, "the live batch appears as running")
    page.goto(url("run", id=CONFIG["live_batch"]))
    page.wait_for_selector("[data-testid=cell]")
    before = dict(states(page))
    check(all(s in ("pending", "running") for s in before.values()), f"no live task has finished yet: {before}")
    first = CONFIG["live_tasks"][0]
    pathlib.Path(CONFIG["release"][first]).write_text("go")
    started = time.time()
    page.wait_for_function(
        "t => [...document.querySelectorAll('[data-testid=cell]')].some(c => c.dataset.task === t && c.dataset.state === 'passed')",
        arg=first,
        timeout=30000,
    )
    after = dict(states(page))
    check(
        after[first] == "passed" and any(after[t] != "passed" for t in CONFIG["live_tasks"][1:]),
        f"the live grid changed while the batch ran ({time.time() - started:.1f} s after the release): {after}",
    )
    # A trial still running: its session page follows its log.
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=cell]')].some(c => c.dataset.state === 'running' && c.querySelector('a'))",
        timeout=30000,
    )
    running = page.eval_on_selector(
        "[data-testid=cell][data-state=running]", "c => c.dataset.task"
    )
    page.goto(url("run", id=f"{CONFIG['live_batch']}/{running}"))
    page.wait_for_selector("[data-testid=event][data-type=tool_call]")
    check(
        page.query_selector("[data-testid=event][data-type=session_finished]") is None,
        f"the running session {running} has not finished in the page",
    )
    pathlib.Path(CONFIG["release"][running]).write_text("go")
    page.wait_for_selector("[data-testid=event][data-type=session_finished]", timeout=30000)
    check(True, "the running session's end appeared in its page without a reload")
    page.goto(url("run", id=CONFIG["live_batch"]))
    page.wait_for_selector("[data-testid=cell]")
    for task in CONFIG["live_tasks"][1:]:
        pathlib.Path(CONFIG["release"][task]).write_text("go")
    page.wait_for_function(
        "n => [...document.querySelectorAll('[data-testid=cell]')].filter(c => c.dataset.state === 'passed').length === n",
        arg=len(CONFIG["live_tasks"]),
        timeout=60000,
    )
    check(True, "every live task passed in the page without a reload")


def main():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CONFIG["chromium"], args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("dialog", lambda dialog: errors.append(f"a dialog opened: {dialog.message}"))
        runs_list(page)
        search(page)
        hostile(page)
        crafted(page)
        batch_page(page)
        children(page)
        workspace(page)
        compare(page)
        live(page)
        if CONFIG.get("screenshots"):
            shoot(page)
        check(not errors, f"no script errors or dialogs: {errors}")
        browser.close()


def shoot(page):
    out = pathlib.Path(CONFIG["screenshots"])
    out.mkdir(parents=True, exist_ok=True)
    # The index's next refresh has the live batch's end.
    page.wait_for_timeout(1500)
    for name, target in [
        ("runs", url("")),
        ("batch", url("run", id=CONFIG["batch_a"])),
        ("session", url("run", id=CONFIG["session"])),
        ("workspace", url("run", id=CONFIG["session"], tab="workspace", step=CONFIG["final_step"], path=CONFIG["changed_file"])),
        ("compare", url("compare", id=[CONFIG["batch_a"], CONFIG["batch_b"]])),
        ("trajectories", url("trajectories", a=f"{CONFIG['batch_a']}/{CONFIG['diverging_task']}", b=f"{CONFIG['batch_b']}/{CONFIG['diverging_task']}")),
    ]:
        page.goto(target)
        page.wait_for_timeout(800)
        page.screenshot(path=str(out / f"view-{name}.png"))


if __name__ == "__main__":
    main()
