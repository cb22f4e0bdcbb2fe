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
  function beat() {
    if (document.visibilityState !== "visible") return;
    if (Date.now() - lastActivity > ACTIVE_WINDOW_MS) return;
    fetch("/api/v1/boards/" + encodeURIComponent(project) + "/heartbeat", {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-Requested-With": "tbhub-heartbeat" },
    }).catch(function () {});
  }
  setInterval(beat, INTERVAL_MS);
  document.addEventListener("visibilitychange", beat);
})();
