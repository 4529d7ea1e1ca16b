// mnemo ui: the tree page asks every few seconds whether the tree changed, and swaps in its new rows.
// The server answers 204 while nothing changed, so a quiet tree costs one listing and no rendering.
(function () {
  "use strict";
  var table = document.getElementById("tree");
  if (!table) { return; }
  var rows = document.getElementById("tree-rows");
  var seconds = parseInt(table.getAttribute("data-refresh"), 10) || 5;
  var fragment = table.getAttribute("data-fragment");  // under the server's secret prefix, as the page is
  function refresh() {
    var stamp = table.getAttribute("data-stamp") || "";
    fetch(fragment + "?stamp=" + encodeURIComponent(stamp), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status !== 200) { return null; }
        var next = response.headers.get("x-tree-stamp");
        return response.text().then(function (html) {
          rows.innerHTML = html;  // the server's escaped rows, as the page itself holds them
          if (next) { table.setAttribute("data-stamp", next); }
        });
      })
      .catch(function () { /* the server stopped: try again next time */ })
      .then(function () { setTimeout(refresh, seconds * 1000); });
  }
  setTimeout(refresh, seconds * 1000);
}());
