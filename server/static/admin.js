/* cmbuyer admin: small progressive enhancements. Every page works without this file.
   - the list's detail drawer (GET /tasks/{id} with X-CMBuyer-View: drawer)
   - select-all / selected count for batch start
   - confirmation prompts on forms with data-confirm
   - live view: short polling of the rows fragment (with the 等待人工确认 count above the table) and of the
     open detail, every 3 s while visible;
     on the devices page a fresh copy of its rows */
(function () {
  "use strict";
  var POLL_MS = 3000;

  function fragment(url, view) {
    return fetch(url, {
      credentials: "same-origin",
      headers: { "X-CMBuyer-View": view, "Accept": "text/html" }
    }).then(function (r) {
      if (r.status === 401) { window.location.assign("/login"); throw new Error("logged out"); }
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    });
  }

  function parse(html) {
    var t = document.createElement("template");
    t.innerHTML = html;   // same-origin, server-rendered and autoescaped HTML
    return t.content;
  }

  // --- confirmations -------------------------------------------------------------------------------
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    // a button may carry its own prompt (e.g. "有误" beside "核对无误" in one form)
    var button = ev.submitter;
    var msg = (button && button.getAttribute("data-confirm")) || (form.getAttribute && form.getAttribute("data-confirm"));
    if (msg && !window.confirm(msg)) { ev.preventDefault(); }
  });

  // --- selection -----------------------------------------------------------------------------------
  function boxes() { return document.querySelectorAll("#task-rows input[name=task]"); }
  function updateCount() {
    var n = 0; boxes().forEach(function (b) { if (b.checked) { n++; } });
    var el = document.getElementById("selected-count");
    if (el) { el.textContent = n ? "已选 " + n + " 个。" : ""; }
  }
  document.addEventListener("change", function (ev) {
    if (ev.target.id === "select-all") {
      boxes().forEach(function (b) { b.checked = ev.target.checked; });
    }
    updateCount();
  });

  // --- drawer --------------------------------------------------------------------------------------
  var drawer = document.getElementById("drawer");
  var drawerBody = document.getElementById("drawer-body");
  var drawerUrl = null;

  function openDrawer(url) {
    drawerUrl = url;
    return fragment(url, "drawer").then(function (html) {
      drawerBody.replaceChildren(parse(html));
      drawer.hidden = false;
      document.body.classList.add("drawer-open");
    });
  }
  function closeDrawer() {
    drawerUrl = null;
    if (drawer) { drawer.hidden = true; drawerBody.replaceChildren(); }
    document.body.classList.remove("drawer-open");
  }
  if (drawer) {
    document.addEventListener("click", function (ev) {
      var link = ev.target.closest && ev.target.closest("a.open-drawer");
      if (!link || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) { return; }
      ev.preventDefault();
      openDrawer(link.getAttribute("href")).catch(function () { window.location.assign(link.href); });
    });
    document.getElementById("drawer-close").addEventListener("click", closeDrawer);
    document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { closeDrawer(); } });
  }

  // --- live view -----------------------------------------------------------------------------------
  function busy(container) {
    var a = document.activeElement;
    if (a && container.contains(a) && a.tagName !== "BUTTON" && a.tagName !== "A") { return true; }
    var dirty = false;
    container.querySelectorAll("textarea, input[type=radio]").forEach(function (el) {
      if ((el.tagName === "TEXTAREA" && el.value) || el.checked) { dirty = true; }
    });
    return dirty;
  }

  function refreshDetail(container) {
    var article = container.querySelector("article.detail");
    if (!article || busy(container)) { return Promise.resolve(); }
    return fragment(article.getAttribute("data-live"), "drawer").then(function (html) {
      var next = parse(html);
      var fresh = next.querySelector("article.detail");
      if (fresh && fresh.getAttribute("data-stamp") !== article.getAttribute("data-stamp") && !busy(container)) {
        if (container.id === "detail-live") {
          // the full page keeps its own notices out of the refreshed copy
          fresh.querySelectorAll(".notice, .error").forEach(function (n) { n.remove(); });
        }
        // collapsed sections (技术细节, 术语说明) stay as the operator left them
        article.querySelectorAll("details[data-keep]").forEach(function (d) {
          fresh.querySelectorAll("details[data-keep]").forEach(function (twin) {
            if (twin.getAttribute("data-keep") === d.getAttribute("data-keep")) { twin.open = d.open; }
          });
        });
        article.replaceWith(fresh);
      }
    });
  }

  function refreshRows() {
    var table = document.getElementById("task-table");
    if (!table) { return Promise.resolve(); }
    var tbody = document.getElementById("task-rows");
    var checked = {};
    boxes().forEach(function (b) { if (b.checked) { checked[b.value] = true; } });
    return fragment(table.getAttribute("data-live"), "rows").then(function (html) {
      var rows = parse(html);
      // the fragment ends with a fresh copy of the 等待人工确认 count above the table: move it there
      var fresh = rows.querySelector("template#waiting-count-fresh");
      if (fresh) {
        fresh.remove();
        var count = document.getElementById("waiting-count");
        var next = fresh.content.getElementById("waiting-count");
        if (count && next) { count.replaceWith(next); }
      }
      tbody.replaceChildren(rows);
      // keep a selection only while the task is still the same version (the server checks it anyway)
      boxes().forEach(function (b) { b.checked = !!checked[b.value]; });
      updateCount();
    });
  }

  // the devices page: its rows (heartbeat, claim, "等待人工确认", supervision) from a fresh copy of the
  // page, unless the operator is in the middle of something there (a ticked revoke box, focus in a field)
  function refreshDevices() {
    var table = document.getElementById("device-table");
    if (!table) { return Promise.resolve(); }
    var tbody = document.getElementById("device-rows");
    function touched() { return busy(tbody) || !!tbody.querySelector("input[type=checkbox]:checked"); }
    if (touched()) { return Promise.resolve(); }
    return fetch(table.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected && /\/login$/.test(new URL(r.url).pathname)) { window.location.assign("/login"); throw new Error("logged out"); }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      }).then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("device-rows");
        if (fresh && fresh.innerHTML !== tbody.innerHTML && !touched()) {
          tbody.replaceChildren.apply(tbody, Array.prototype.slice.call(fresh.childNodes));
        }
      });
  }

  function tick() {
    if (document.visibilityState !== "visible") { return; }
    var jobs = [refreshRows(), refreshDevices()];
    if (drawerUrl && drawer && !drawer.hidden) { jobs.push(refreshDetail(drawerBody)); }
    var page = document.getElementById("detail-live");
    if (page) { jobs.push(refreshDetail(page)); }
    Promise.all(jobs).catch(function () { /* transient: try again next tick */ });
  }
  window.setInterval(tick, POLL_MS);
  updateCount();
}());
