// Live updates without a build step: every few seconds a page marked `data-live` is fetched again and its
// <main> swapped in, unless the operator is using a form or a filter box on it. A sign-in that expired shows the
// sign-in page. A filter box (`input.filter[data-filter=<table id>]`) hides the rows of its table that do not
// contain its text (any case); what it holds survives the live swaps.
(function () {
  "use strict";
  var PERIOD = 2000;

  function applyFilter(input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    if (!table) return;
    var wanted = input.value.trim().toLowerCase();
    var rows = table.tBodies.length ? table.tBodies[0].rows : [];
    for (var i = 0; i < rows.length; i++) {
      var shown = !wanted || rows[i].textContent.toLowerCase().indexOf(wanted) >= 0;
      rows[i].hidden = !shown;
    }
  }

  function filters() {
    return Array.prototype.slice.call(document.querySelectorAll("input.filter[data-filter]"));
  }

  function refresh() {
    var main = document.getElementById("main");
    if (!main || !main.hasAttribute("data-live") || document.hidden) return;
    var active = document.activeElement;
    if (active && (active.form || (active.classList && active.classList.contains("filter")))) return;
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (response.redirected) { window.location.assign(response.url); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (!fresh) return;
        var kept = {};
        filters().forEach(function (input) { kept[input.getAttribute("data-filter")] = input.value; });
        main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
        filters().forEach(function (input) {
          var value = kept[input.getAttribute("data-filter")];
          if (value) { input.value = value; applyFilter(input); }
        });
      })
      .catch(function () { /* the daemon may be restarting: the next round tries again */ });
  }

  document.addEventListener("input", function (event) {
    var target = event.target;
    if (target && target.classList && target.classList.contains("filter")) applyFilter(target);
  });
  window.setInterval(refresh, PERIOD);
})();
