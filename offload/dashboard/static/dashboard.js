// Live roster: the server sends the whole roster fragment (already escaped HTML) whenever it
// changes; we swap it in. No reloads, no client-side templating.
(function () {
  var roster = document.getElementById("roster");
  var state = document.getElementById("live-state");
  if (!roster || !window.EventSource) { return; }
  function show(name, text) { state.dataset.state = name; state.textContent = text; }
  var source = new EventSource("/events");
  source.addEventListener("roster", function (event) {
    roster.innerHTML = event.data;
    show("live", "live");
  });
  source.onopen = function () { show("live", "live"); };
  source.onerror = function () { show("reconnecting", "reconnecting…"); };
})();
