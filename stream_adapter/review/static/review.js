(() => {
  "use strict";
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");

  // One time format: the absolute UTC time, and beside it how long ago (kept current here).
  function ago(iso) {
    const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " d ago";
  }
  function ages() {
    for (const t of document.querySelectorAll(".rel[data-since]")) {
      t.textContent = "(" + ago(t.dataset.since) + ")";
    }
  }

  // Share links: copy the approval's URL.
  function copyButtons() {
    for (const b of document.querySelectorAll("button[data-copy]")) {
      if (b.dataset.bound) continue;
      b.dataset.bound = "1";
      b.addEventListener("click", async () => {
        const field = document.getElementById(b.dataset.copy);
        try {
          await navigator.clipboard.writeText(field.value);
          b.textContent = "Copied";
        } catch (e) {
          field.select();
          b.textContent = "Press Ctrl+C";
        }
      });
    }
  }

  function swap(html) {
    const kept = {}, focused = document.activeElement && document.activeElement.id;
    for (const i of live.querySelectorAll("input[name=reason], textarea[name=result]")) {
      kept[i.id] = i.value;
    }
    live.innerHTML = html;
    for (const [id, v] of Object.entries(kept)) {
      const i = document.getElementById(id); if (i) i.value = v;
    }
    if (focused) { const f = document.getElementById(focused); if (f) f.focus(); }
    summarize();
    ages();
    copyButtons();
  }
  function summarize() {
    const summary = live && live.querySelector("[data-summary]");
    if (summary && status) status.textContent = summary.dataset.summary;
  }

  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  async function poll() {
    let version = Number(live.dataset.version);
    const url = live.dataset.live;
    for (;;) {
      try {
        const r = await fetch(url + (url.includes("?") ? "&" : "?") + "since=" + version,
          {credentials: "same-origin"});
        if (r.status === 401) { location.reload(); return; }
        if (!r.ok) { await pause(2000); continue; }
        const v = Number(r.headers.get("X-View-Version"));
        if (v !== version) { swap(await r.text()); version = v; }
      } catch (e) { await pause(2000); }
    }
  }

  setInterval(ages, 10000);
  ages();
  copyButtons();
  if (live) { summarize(); poll(); }
})();
