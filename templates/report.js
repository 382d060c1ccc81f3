/* spikeforensics report: draw every chart from the embedded specs with the one
   embedded copy of plotly.js, theme it from the page's CSS variables, and record
   what happened in #sf-status (charts rendered, errors, any non-local resource)
   so a headless browser test can read it from the DOM. No network access. */
(function () {
  "use strict";
  var status = document.getElementById("sf-status");
  var tScript = Math.round(performance.now());
  var errors = [];
  function note(msg) {
    errors.push(String(msg).slice(0, 300));
    if (status) status.setAttribute("data-errors", JSON.stringify(errors));
  }
  window.addEventListener("error", function (e) { note("error: " + (e.message || e.type)); });
  window.addEventListener("unhandledrejection", function (e) { note("rejection: " + (e.reason && e.reason.message || e.reason)); });
  var origError = console.error;
  console.error = function () {
    note("console.error: " + Array.prototype.join.call(arguments, " "));
    return origError.apply(console, arguments);
  };
  document.addEventListener("securitypolicyviolation", function (e) { note("csp: " + e.violatedDirective + " " + e.blockedURI); });

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || undefined;
  }
  function themed(layout) {
    var fg = cssVar("--fg"), grid = cssVar("--grid"), muted = cssVar("--muted");
    var out = Object.assign({}, layout, {
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: fg, size: 12 }
    });
    Object.keys(out).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        out[key] = Object.assign({ gridcolor: grid, zerolinecolor: grid, linecolor: muted }, out[key]);
      }
    });
    return out;
  }
  function hasWebGL() {
    try {
      var c = document.createElement("canvas");
      return !!(c.getContext("webgl") || c.getContext("experimental-webgl"));
    } catch (e) { return false; }
  }
  function externalResources() {
    if (!window.performance || !performance.getEntriesByType) return [];
    return performance.getEntriesByType("resource").map(function (r) { return r.name; })
      .filter(function (u) { return !/^(data:|blob:|file:|about:)/.test(u); });
  }
  function finish(rendered) {
    if (!status) return;
    status.setAttribute("data-charts-rendered", String(rendered));
    status.setAttribute("data-external", JSON.stringify(externalResources()));
    status.setAttribute("data-render-ms", String(Math.round(performance.now())));
    status.setAttribute("data-done", "1");
  }

  window.sfRender = function () {
    var tStart = Math.round(performance.now());
    if (status) status.setAttribute("data-timing", "script " + tScript + " ms, plotly parsed " + tStart + " ms");
    var specs;
    try {
      specs = JSON.parse(document.getElementById("sf-data").textContent).figures;
    } catch (e) { note("data: " + e.message); finish(0); return; }
    if (typeof Plotly === "undefined") { note("plotly.js missing"); finish(0); return; }
    var wantsGL = Object.keys(specs).some(function (k) {
      return specs[k].data.some(function (t) { return t.type === "scattergl"; });
    });
    var gl = wantsGL && hasWebGL();
    var divs = Array.prototype.slice.call(document.querySelectorAll(".sf-chart[data-figure]"));
    var rendered = 0;
    var config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["sendDataToCloud"] };
    var jobs = divs.map(function (div) {
      var spec = specs[div.getAttribute("data-figure")];
      if (!spec) { note("no spec for chart " + div.getAttribute("data-figure")); return Promise.resolve(); }
      var data = spec.data.map(function (t) {
        return (!gl && t.type === "scattergl") ? Object.assign({}, t, { type: "scatter" }) : t;
      });
      return Promise.resolve(Plotly.newPlot(div, data, themed(spec.layout), config)).then(function () {
        if (div.querySelector(".main-svg")) { rendered += 1; div.setAttribute("data-rendered", "1"); }
        else note("chart " + div.id + " drew no svg");
      }, function (e) { note("chart " + div.id + ": " + (e && e.message || e)); });
    });
    Promise.all(jobs).then(function () { finish(rendered); });

    // follow the OS theme while the page is open
    if (window.matchMedia) {
      var mq = window.matchMedia("(prefers-color-scheme: dark)");
      var swap = function () {
        divs.forEach(function (div) {
          var spec = specs[div.getAttribute("data-figure")];
          if (spec && div.getAttribute("data-rendered")) Plotly.relayout(div, themed(spec.layout));
        });
      };
      if (mq.addEventListener) mq.addEventListener("change", swap);
    }
    // print: open every <details>, restore afterwards
    var opened = [];
    window.addEventListener("beforeprint", function () {
      document.querySelectorAll("details:not([open])").forEach(function (d) { d.open = true; opened.push(d); });
    });
    window.addEventListener("afterprint", function () {
      opened.forEach(function (d) { d.open = false; });
      opened = [];
    });
  };
})();
