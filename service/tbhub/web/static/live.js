// Live state: while a page is open and visible, its board and run state badges follow the
// server every few seconds, in place. Progressive enhancement: without this script the page
// shows the state as of its load. The page names what to poll in `data-live-url` (a JSON
// endpoint of /api/v1); badges carry `data-board-state="<project>"` or
// `data-run-state="<run id>"`, and `data-state` with the state they show.
(function () {
  "use strict";
  var holder = document.querySelector("[data-live-url]");
  if (!holder || !window.fetch) return;
  var url = holder.getAttribute("data-live-url");
  var PERIOD_MS = 5000;

  function show(badge, state, detail) {
    if (badge.getAttribute("data-state") === state) return;
    var classes = badge.className.split(/\s+/).filter(function (c) {
      return c && c.indexOf("state-") !== 0;
    });
    classes.push("state-" + state);
    badge.className = classes.join(" ");
    badge.setAttribute("data-state", state);
    badge.textContent = state;
    if (detail) badge.title = detail; else badge.removeAttribute("title");
  }

  function each(selector, value, fn) {
    var found = document.querySelectorAll(selector);
    for (var i = 0; i < found.length; i++) {
      if (found[i].getAttribute(selector.slice(1, -1)) === String(value)) fn(found[i]);
    }
  }

  // Either the project list (GET /api/v1/projects) or one project's state
  // (GET /api/v1/projects/<p>/state): both carry {name, board: {state, detail}}.
  // The project page's prerender of its board (Speculation Rules, web/runs.board_prerender)
  // must not outlive the board: a board that stops under the open page would leave a
  // prerendered page with nothing behind it for the click to show. So the rules go when the
  // board stops or fails, and come back when it serves again (someone else opened it: the
  // prerender starts nothing). Chromium drops a prerender whose rules are removed.
  var rules = document.querySelector('script[type="speculationrules"]');
  var rulesText = rules ? rules.textContent : null;
  var KEEPS_RULES = ["live", "restarting", "starting"];

  function followBoard(state) {
    if (rulesText === null) return;
    if (KEEPS_RULES.indexOf(state) < 0 && rules) {
      rules.remove();
      rules = null;
    } else if (state === "live" && !rules) {
      rules = document.createElement("script");
      rules.type = "speculationrules";
      rules.textContent = rulesText;
      document.head.appendChild(rules);
    }
  }

  function apply(data) {
    var projects = Array.isArray(data) ? data : [data];
    projects.forEach(function (project) {
      if (project.board) {
        each("[data-board-state]", project.name, function (badge) {
          if (badge.getAttribute("data-state") !== project.board.state) {
            followBoard(project.board.state);
          }
          show(badge, project.board.state, project.board.detail);
        });
      }
      (project.runs || []).forEach(function (run) {
        each("[data-run-state]", run.id, function (badge) { show(badge, run.state); });
      });
    });
  }

  var timer = null;
  var asking = false;

  function poll() {
    timer = null;
    if (document.hidden) { later(); return; }
    asking = true;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) { if (data) apply(data); })
      .catch(function () { /* offline or signed out: try again later */ })
      .then(function () { asking = false; later(); });
  }

  function later() { timer = window.setTimeout(poll, PERIOD_MS); }

  // A page shown again asks at once: what changed while it was hidden (a board stopped
  // when idle) shows before the next click, not up to a period later.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || asking || timer === null) return;
    window.clearTimeout(timer);
    poll();
  });

  later();
})();
