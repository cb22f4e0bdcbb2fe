// tbhub's bar on a board page, added by nginx like heartbeat.js (nginx/tbhub.conf.j2): the
// board's name (a link to its page in tbhub), the way back to tbhub's projects and sign-out,
// as JupyterHub's control panel sits on a user's server. A share link's guest sees "shared
// view", no way into tbhub's pages and no sign-out.
// A project without runs gets a panel saying where to write them, instead of TensorBoard's
// "no dashboards" text; it reloads the page once the first run has files.
// A plugin the board leaves out (one a project turns on, as the projector) has no tab: the
// bar says so, and a click on it tells why and how an owner turns it on (an owner gets a link
// to the project's board page); a plugin that failed to load is named with its error.
// Everything is built with textContent: no name ever goes through innerHTML.
(function () {
  "use strict";
  var script = document.currentScript;
  var project = script && script.dataset.project;
  if (!project) return;
  // A board that does not serve yet is answered by tbhub's own page (starting, failed) under
  // the board's URL, so nginx adds this script there too: that page has tbhub's header and
  // follows the board itself; a bar or an empty-project panel on it would be gone at once.
  if (document.body.hasAttribute("data-tbhub-page")) return;
  var url = "/api/v1/boards/" + encodeURIComponent(project) + "/bar";
  var EMPTY_POLL_MS = 5000;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) { node.setAttribute(name, attrs[name]); });
    (children || []).forEach(function (child) {
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  // A share link's cookie is sent to this board's path only, so its guest is not known to
  // tbhub's API (401): the page itself was let in, so the reader is such a guest.
  var GUEST = { project: project, user: null, shared: true, runs: null };

  function load() {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401) return GUEST;
        return r.ok ? r.json() : Promise.reject(r.status);
      });
  }

  function signOut(info) {
    // On tbhub's own origin the form posts at once, with this session's CSRF token; on a
    // board's own origin tbhub's session lives elsewhere: its sign-out page asks there.
    var sameOrigin = new URL(info.home).origin === window.location.origin;
    if (sameOrigin && info.csrf_token) {
      return el("form", { method: "post", action: "/auth/logout", class: "tbhub-bar-signout" }, [
        el("input", { type: "hidden", name: "csrf_token", value: info.csrf_token }),
        el("button", { type: "submit" }, ["Sign out"]),
      ]);
    }
    return el("a", { href: info.home + "/auth/logout" }, ["Sign out"]);
  }

  function bar(info) {
    var who = info.shared
      ? [el("span", { class: "tbhub-bar-badge" }, ["Shared view (read-only)"])]
      : [el("span", { class: "tbhub-bar-user" }, [info.user]), signOut(info)];
    var parts = [el("span", { class: "tbhub-bar-brand" }, ["tbhub"])];
    if (!info.shared) parts.push(el("a", { href: info.home + "/" }, ["\u2190 Projects"]));
    // The board's name; for members, a link to its page in tbhub (the project's runs, or
    // the compare boards, the view's page). A compare board or a view is named by its own
    // name, not its slug.
    var title = el("strong", {}, [info.title || info.project]);
    var off = info.plugins_off || [];
    if (off.length) {
      // Named as TensorBoard names their tabs.
      var names = off.map(function (p) { return p.name.toUpperCase(); });
      parts.push(el("button", { type: "button", class: "tbhub-bar-off", "aria-expanded": "false",
                                "aria-controls": "tbhub-plugins-off", "data-tbhub": "plugins-off" },
                    [names.join(", ") + " off"]));
    }
    parts.push(
      el("span", { class: "tbhub-bar-project" }, [
        el("span", { class: "tbhub-bar-label" },
           [{ compare: "Compare ", view: "View " }[info.kind] || "Project "]),
        info.page ? el("a", { href: info.home + info.page, "data-tbhub": "board-page" }, [title])
                  : title,
      ])
    );
    // A saved view's board says it shows part of the project, and links the whole of it.
    if (info.whole_project) {
      parts.push(el("a", { href: info.home + info.whole_project, "data-tbhub": "whole-project" },
                    ["Whole project"]));
    }
    parts.push(
      el("span", { class: "tbhub-bar-who" }, who)
    );
    return el("nav", { id: "tbhub-bar", "aria-label": "tbhub" }, parts);
  }

  function emptyPanel(info) {
    var parts = [el("h1", { id: "tbhub-empty-title" }, ["No runs in " + info.project + " yet"])];
    if (info.logdir) {
      parts.push(
        el("p", {}, ["Write TensorBoard event files into a directory per run under this " +
                     "project's directory on the shared storage:"]),
        el("pre", {}, [el("code", { "data-tbhub": "logdir" }, [info.logdir + "/<run>/"])]),
        el("p", {}, ["or let tbhub register the run and give your job its log directory " +
                     "(in $TBHUB_LOGDIR):"]),
        el("pre", {}, [el("code", { "data-tbhub": "run-command" }, [info.run_command])])
      );
    }
    parts.push(el("p", { class: "tbhub-empty-hint" },
                  ["This page shows the board as soon as the first run has written a file."]));
    return el("section", { id: "tbhub-empty", "aria-labelledby": "tbhub-empty-title" }, parts);
  }

  function watchForRuns() {
    var timer = setInterval(function () {
      if (document.visibilityState !== "visible") return;
      load().then(function (info) {
        if (info.runs > 0) { clearInterval(timer); window.location.reload(); }
      }).catch(function () {});
    }, EMPTY_POLL_MS);
  }

  function capital(text) { return text.charAt(0).toUpperCase() + text.slice(1); }

  // Each plugin off: why, and how to turn it on; an owner gets a link to the project's
  // board page, where it is turned on; others are told to ask an owner.
  function offPanel(info) {
    var items = (info.plugins_off || []).map(function (p) {
      var parts = [el("strong", {}, [p.name]), " is off (" + p.why + "). " + capital(p.how) + "."];
      if (p.toggle) {
        parts.push(" ", el("a", { href: info.home + p.toggle, "data-tbhub": "plugin-toggle" },
                            ["Turn " + p.name + " on"]));
      }
      return el("li", { "data-plugin": p.name }, parts);
    });
    return el("section", { id: "tbhub-plugins-off", hidden: "", "aria-label": "Plugins off" },
              [el("ul", {}, items)]);
  }

  // Plugins the board tried to load and could not: shown at once (their tab is missing or
  // broken). Nothing when the answer has no such field.
  function errorsPanel(info) {
    var failed = info.plugin_errors || [];
    if (!failed.length) return null;
    var items = failed.map(function (f) {
      return el("li", { "data-plugin": f.plugin },
                ["plugin " + f.plugin + " failed to load: " + f.error]);
    });
    var dismiss = el("button", { type: "button" }, ["Dismiss"]);
    var panel = el("section", { id: "tbhub-plugin-errors", role: "status",
                                "aria-label": "Plugins that failed to load" },
                   [el("ul", {}, items), dismiss]);
    dismiss.addEventListener("click", function () { panel.remove(); });
    return panel;
  }

  function show(info) {
    document.documentElement.classList.add("tbhub-bar-on");
    document.body.insertBefore(bar(info), document.body.firstChild);
    var toggle = document.querySelector("#tbhub-bar .tbhub-bar-off");
    if (toggle) {
      var panel = offPanel(info);
      document.body.insertBefore(panel, document.getElementById("tbhub-bar").nextSibling);
      toggle.addEventListener("click", function () {
        var open = toggle.getAttribute("aria-expanded") !== "true";
        toggle.setAttribute("aria-expanded", String(open));
        panel.hidden = !open;
      });
    }
    var errors = errorsPanel(info);
    if (errors) document.body.insertBefore(errors, document.getElementById("tbhub-bar").nextSibling);
    if (info.runs === 0) {
      document.body.insertBefore(emptyPanel(info), document.getElementById("tbhub-bar").nextSibling);
      watchForRuns();
    }
  }

  load().then(show).catch(function () { /* no bar: the board itself still works */ });
})();
