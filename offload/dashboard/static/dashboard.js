// Live parts: an element with data-live="URL" opens one EventSource there; the server sends the
// whole part (already escaped HTML) whenever it changes, and we swap it in. No reloads, no
// client-side templating. Open expanders and the focused element keep their place across a swap.
(function () {
  if (!window.EventSource) { return; }
  var state = document.getElementById("live-state");
  function show(name, text) { if (state) { state.dataset.state = name; state.textContent = text; } }
  function swap(target, html) {
    var open = Array.from(target.querySelectorAll("details[open][id]")).map(function (d) { return d.id; });
    var focused = document.activeElement && target.contains(document.activeElement) ? document.activeElement.id : null;
    target.innerHTML = html;
    open.forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = true; } });
    if (focused) { var f = document.getElementById(focused); if (f) { f.focus(); } }
  }
  // One stream per page; other parts it sends name it with data-part-of="ID of the streaming element".
  Array.from(document.querySelectorAll("[data-live]")).forEach(function (host) {
    var source = new EventSource(host.dataset.live);
    var parts = [host].concat(Array.from(document.querySelectorAll('[data-part-of="' + host.id + '"]')));
    parts.forEach(function (target) {
      source.addEventListener(target.dataset.event || "roster", function (event) {
        swap(target, event.data);
        show("live", "live");
      });
    });
    source.onopen = function () { show("live", "live"); };
    source.onerror = function () { show("reconnecting", "reconnecting…"); };
  });
})();
// "/" focuses the page's search (the history's goal search), as on most sites; typing in a
// field is left alone.
document.addEventListener("keydown", function (event) {
  var field = document.querySelector("input[type=search]");
  var typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
  if (event.key === "/" && field && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    field.focus();
  }
});
// j / k walk the rows of the page's table (the overview's units, the history, a session's
// delegations): the focus moves to the next / previous row's link, which Enter opens. The
// links carry ids, so a live swap of the roster gives the focus back to the same row.
document.addEventListener("keydown", function (event) {
  var typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
  if ((event.key !== "j" && event.key !== "k") || typing || event.ctrlKey || event.metaKey || event.altKey) {
    return;
  }
  var links = Array.from(document.querySelectorAll("a.open-row"));
  if (!links.length) { return; }
  var at = links.indexOf(document.activeElement);
  var next = at < 0 ? (event.key === "j" ? 0 : links.length - 1)
                    : Math.min(links.length - 1, Math.max(0, at + (event.key === "j" ? 1 : -1)));
  event.preventDefault();
  links[next].focus();
  links[next].scrollIntoView({block: "nearest"});
});
