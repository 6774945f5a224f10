// Sluice console: charts from /api/series (uPlot), refreshed every 5 s.
(function () {
  "use strict";
  var palette = ["#1f6feb", "#0e9f6e", "#d1242f", "#b7791f", "#8250df", "#0891b2"];

  function build(el) {
    var kind = el.getAttribute("data-chart");
    var group = el.getAttribute("data-group") || "";
    var plot = null, keys = "";
    function refresh() {
      fetch("/api/series" + (group ? "?group=" + encodeURIComponent(group) : ""), { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (d) {
          var note = el.parentNode.querySelector(".chart-error");
          if (!note) {
            note = document.createElement("div");
            note.className = "banner err chart-error";
            el.parentNode.insertBefore(note, el);
          }
          note.textContent = d.error ? "Metrics cannot be read: " + d.error : "";
          note.style.display = d.error ? "" : "none";
          var series = [{}], data = [d.time];
          if (kind === "throughput") {
            series.push({ label: "stored/s", stroke: palette[0], width: 2 });
            series.push({ label: "pulled/s", stroke: palette[1], width: 2 });
            series.push({ label: "dead letters/s", stroke: palette[2], width: 1 });
            data.push(d.put, d.get, d.dead);
          } else {
            Object.keys(d.lag).sort().forEach(function (g, i) {
              series.push({ label: g, stroke: palette[i % palette.length], width: 2 });
              data.push(d.lag[g]);
            });
          }
          var k = series.map(function (s) { return s.label; }).join("|");
          if (!plot || k !== keys) {
            if (plot) { plot.destroy(); }
            keys = k;
            var width = Math.max(el.clientWidth, 300);
            plot = new uPlot({ width: width, height: 200, series: series,
              axes: [{ space: 80, incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600] }, { size: 60 }],
              legend: { live: false } }, data, el);
          } else {
            plot.setData(data);
          }
        })
        .catch(function () {});
    }
    refresh();
    setInterval(refresh, 5000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("[data-chart]").forEach(build);
  });
})();
