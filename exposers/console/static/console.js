// Live updates without a build step: every few seconds a page marked `data-live` is fetched again and its
// <main> swapped in, unless the operator is using a form on it. A sign-in that expired shows the sign-in page.
(function () {
  "use strict";
  var PERIOD = 2000;
  function refresh() {
    var main = document.getElementById("main");
    if (!main || !main.hasAttribute("data-live") || document.hidden) return;
    var active = document.activeElement;
    if (active && active.form) return;
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (response.redirected) { window.location.assign(response.url); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (fresh) main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
      })
      .catch(function () { /* the daemon may be restarting: the next round tries again */ });
  }
  window.setInterval(refresh, PERIOD);
})();
