// A page that waits for a board (starting, failed, no capacity) follows the board's state and
// shows the board the moment it serves. It long-polls the control plane
// (GET /api/v1/boards/<board>/state?since=<the page's state>): the answer comes as soon as the
// supervisor has written a change, or after `wait` seconds with none, and the page asks
// again at once. An answer that differs from the page (ready, failed, starting again) reloads
// the page, and the server says what changed.
// Where the long-poll is not open to the reader (a share link's guest: its cookie is sent to
// the board's own path only) or fails, the page falls back to asking the board for its runs,
// through nginx and the gate like TensorBoard's own calls: 503 with the gate's code while the
// board does not serve, 200 once it lists its runs; every 150 ms while it starts, every
// `retry` seconds while it failed or has no room.
// A script reload, not a <meta http-equiv=refresh>: with a fragment in the URL (TensorBoard's
// #timeseries) that is a same-document navigation in Chromium and never reloads; the reload
// keeps the fragment. The meta refresh stays for browsers without JS.
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !script.dataset.board) return;
  var runs = script.dataset.board + "data/runs";
  var follow = script.dataset.follow;
  var state = script.dataset.state;
  var STARTING_MS = 150;
  var WAIT_S = 25;
  var waitMs = state === "board_starting"
    ? STARTING_MS
    : Math.max(1, Number(script.dataset.retry) || 5) * 1000;
  var failures = 0;

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

  function longPoll() {
    var url = follow + "?since=" + encodeURIComponent(state) + "&wait=" + WAIT_S;
    fetch(url, { credentials: "same-origin", cache: "no-store",
                 headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status !== 200) {
          // Not open to this reader (401/404), or the control plane is away: the old way.
          poll();
          return;
        }
        return response.json().then(function (body) {
          failures = 0;
          if (body.state !== state) { reload(); } else { longPoll(); }
        });
      })
      .catch(function () {
        // A dropped connection: again at once, then the old way after a few in a row.
        failures += 1;
        if (failures < 3) { window.setTimeout(longPoll, 250); } else { poll(); }
      });
  }

  if (follow) { longPoll(); } else { window.setTimeout(poll, waitMs); }
})();
