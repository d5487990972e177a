// automaton console: reload a page when what it shows changes (server-sent
// events from /events), unless a form on it is being filled in; append a
// running tick's new output to its page; fill the sign-in form from a link's
// #token=... (the fragment never reaches the server); show times in the
// viewer's zone.
(function () {
  "use strict";
  var live = document.body.getAttribute("data-live");
  var typing = function () {
    var fields = document.querySelectorAll("textarea, input[type=text]");
    for (var i = 0; i < fields.length; i++) if (fields[i].value) return true;
    return document.activeElement && /TEXTAREA|INPUT/.test(document.activeElement.tagName) &&
      document.activeElement.type !== "hidden" && document.activeElement.type !== "submit";
  };
  var pending = null;
  var reload = function () {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      if (typing()) {
        var note = document.getElementById("changed");
        if (note) note.hidden = false;
        return;
      }
      location.reload();
    }, 150);
  };
  // A running tick's page: every 2 s, the bytes each output gained since
  // the last look are appended (the page stays where it is unless it was
  // at the end); once the tick has ended, the page is loaded again for
  // its outcome.
  var follow = function () {
    var outputs = document.querySelectorAll("pre[data-stream]");
    var ended = false;
    var reads = Array.prototype.map.call(outputs, function (pre) {
      var url = location.pathname + "/output?stream=" + pre.getAttribute("data-stream") +
        "&from=" + pre.getAttribute("data-offset");
      return fetch(url, { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) return;
        if (r.headers.get("x-running") === "0") ended = true;
        var next = r.headers.get("x-next-offset");
        return r.text().then(function (text) {
          if (!text) return;
          var end = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 4;
          pre.appendChild(document.createTextNode(text));
          pre.setAttribute("data-offset", next);
          if (end) window.scrollTo(0, document.documentElement.scrollHeight);
        });
      });
    });
    var since = document.getElementById("elapsed");
    if (since) {
      var s = Math.max(0, Math.round((Date.now() - new Date(since.getAttribute("data-since"))) / 1000));
      since.textContent = s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m " + (s % 60) + "s" :
        Math.floor(s / 3600) + "h " + Math.floor(s / 60) % 60 + "m " + (s % 60) + "s";
    }
    Promise.all(reads).then(function () {
      if (ended) location.reload(); else setTimeout(follow, 2000);
    }, function () { setTimeout(follow, 2000); });
  };
  if (live === "running") {
    setTimeout(follow, 2000);
  } else if (live && window.EventSource) {
    var url = "/events" + (live === "*" ? "" : "?loop=" + encodeURIComponent(live));
    new EventSource(url).addEventListener("change", reload);
  }
  if (live) {
    var note = document.createElement("p");
    note.id = "changed";
    note.className = "changed";
    note.hidden = true;
    note.textContent = "This loop changed. ";
    var again = document.createElement("a");
    again.href = location.pathname;
    again.textContent = "Reload";
    note.appendChild(again);
    var main = document.querySelector("main");
    if (main) main.insertBefore(note, main.firstChild);
  }
  // Times in the viewer's zone: the server writes them in UTC with their
  // instant in datetime=; shown here as local time with how long ago.
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var age = function (ms) {
    var s = Math.round(ms / 1000), a = Math.abs(s);
    if (a < 5) return "just now";
    var span = a < 60 ? a + "s" : a < 3600 ? Math.floor(a / 60) + "m" :
      a < 86400 ? Math.floor(a / 3600) + "h" : Math.floor(a / 86400) + "d";
    return s > 0 ? span + " ago" : "in " + span;
  };
  var times = document.querySelectorAll("time[datetime]");
  for (var t = 0; t < times.length; t++) {
    var d = new Date(times[t].getAttribute("datetime"));
    if (isNaN(d)) continue;
    var zone = "";
    try { zone = " " + Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { zone = ""; }
    times[t].textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + zone + " (" + age(Date.now() - d.getTime()) + ")";
  }
  var token = document.getElementById("token");
  var m = /[#&]token=([^&]+)/.exec(location.hash);
  if (token && m) {
    token.value = decodeURIComponent(m[1]);
    history.replaceState(null, "", location.pathname);
  }
})();
