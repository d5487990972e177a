// automaton console: reload a page when what it shows changes (server-sent
// events from /events), unless a form on it is being filled in; keep a
// running tick's output page fresh; fill the sign-in form from a link's
// #token=... (the fragment never reaches the server).
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
  if (live === "running") {
    setInterval(reload, 2000);
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
  var token = document.getElementById("token");
  var m = /[#&]token=([^&]+)/.exec(location.hash);
  if (token && m) {
    token.value = decodeURIComponent(m[1]);
    history.replaceState(null, "", location.pathname);
  }
})();
