// Orbit console: refreshes the figures of an element with data-live from
// its JSON fragment every few seconds, without reloading the page. Pages
// read the same without it.
(function () {
  "use strict";
  var every = 3000;
  function apply(el, data) {
    if (el.hasAttribute("data-live-keyed")) {
      el.querySelectorAll("[data-key]").forEach(function (row) {
        var d = data[row.getAttribute("data-key")];
        if (d) { fill(row, d); }
      });
    } else {
      fill(el, data);
    }
  }
  function fill(el, d) {
    el.querySelectorAll("[data-field]").forEach(function (f) {
      var v = d[f.getAttribute("data-field")];
      if (v !== undefined && f.textContent !== v) { f.textContent = v; }
    });
  }
  function poll(el) {
    fetch(el.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) { apply(el, d); } })
      .catch(function () {})
      .finally(function () { setTimeout(function () { poll(el); }, every); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(function (el) {
      setTimeout(function () { poll(el); }, every);
    });
  });
})();
