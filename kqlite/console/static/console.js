// kqlite console: the one script of the console, served from the package (no network).
// Every element with a data-refresh attribute is replaced, every REFRESH_MS, by what
// the server renders at that URL (an SVG chart, the cluster's health). Pages are
// complete without it.
(function () {
  "use strict";
  var REFRESH_MS = 2000;
  function refresh() {
    var nodes = document.querySelectorAll("[data-refresh]");
    Array.prototype.forEach.call(nodes, function (node) {
      fetch(node.getAttribute("data-refresh"), {credentials: "same-origin"})
        .then(function (answer) { return answer.ok ? answer.text() : null; })
        .then(function (text) {
          if (text !== null) {
            node.innerHTML = text;
            node.setAttribute("data-refreshed", String(Date.now()));
          }
        })
        .catch(function () { /* the next round tries again */ });
    });
  }
  if (document.querySelector("[data-refresh]")) {
    setInterval(refresh, REFRESH_MS);
  }
}());
