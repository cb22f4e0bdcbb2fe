// A page that waits for a board (starting, failed, no capacity) follows the board's state and
// shows the board the moment it answers. It asks the board for its runs, through nginx and
// the gate like TensorBoard's own calls: 503 with the gate's code while the board does not
// serve, 200 once it lists its runs. While the board starts it asks every 150 ms; while it
// failed or has no room, every `retry` seconds. An answer that differs from the page (ready,
// failed, starting again, signed out) reloads the page, and the server says what changed.
// A script reload, not a <meta http-equiv=refresh>: with a fragment in the URL (TensorBoard's
// #timeseries) that is a same-document navigation in Chromium and never reloads; the reload
// keeps the fragment. The meta refresh stays for browsers without JS.
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !script.dataset.board) return;
  var runs = script.dataset.board + "data/runs";
  var state = script.dataset.state;
  var STARTING_MS = 150;
  var waitMs = state === "board_starting"
    ? STARTING_MS
    : Math.max(1, Number(script.dataset.retry) || 5) * 1000;

  function reload() { window.location.reload(); }

  function poll() {
    fetch(runs, { credentials: "same-origin", cache: "no-store",
                  headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status !== 503) {
          // 200: the board serves. 401/404: the page says why. A proxy error: try again.
          if (response.status < 500) { reload(); } else { window.setTimeout(poll, 1000); }
          return;
        }
        return response.json().then(function (body) {
          var code = body && body.error && body.error.code;
          if (code !== state) { reload(); } else { window.setTimeout(poll, waitMs); }
        });
      })
      .catch(function () { window.setTimeout(poll, 1000); });
  }

  window.setTimeout(poll, waitMs);
})();
