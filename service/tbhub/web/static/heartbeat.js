// tbhub heartbeat, injected by nginx into a board's page (DESIGN.md, decision 6).
// TensorBoard does not poll by default, so a tab someone is reading sends no requests.
// While the tab is visible and its user was active recently, tell tbhub the board is used.
(function () {
  "use strict";
  var script = document.currentScript;
  var project = script && script.dataset.project;
  if (!project) return;
  var INTERVAL_MS = 60 * 1000;
  var ACTIVE_WINDOW_MS = 10 * 60 * 1000;
  var lastActivity = Date.now();
  ["mousemove", "keydown", "wheel", "touchstart", "scroll"].forEach(function (name) {
    window.addEventListener(name, function () { lastActivity = Date.now(); }, { passive: true });
  });
  // A POST made with the session cookie needs this session's CSRF token (auth/csrf.py).
  var token = null;
  function csrfToken() {
    if (token) return Promise.resolve(token);
    return fetch("/api/v1/csrf", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (body) { token = body.token; return token; });
  }
  function beat() {
    if (document.visibilityState !== "visible") return;
    if (Date.now() - lastActivity > ACTIVE_WINDOW_MS) return;
    csrfToken().then(function (value) {
      return fetch("/api/v1/boards/" + encodeURIComponent(project) + "/heartbeat", {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRF-Token": value },
      });
    }).then(function (r) {
      if (r.status === 403) token = null;  // a new session: fetch its token next time
    }).catch(function () { token = null; });
  }
  setInterval(beat, INTERVAL_MS);
  document.addEventListener("visibilitychange", beat);
})();
