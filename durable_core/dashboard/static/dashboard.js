// Confirmations: a form with data-confirm is sent only once its question is accepted (the
// listener is on the document, so forms a live refresh brings in are covered too).
document.addEventListener("submit", function (event) {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// Live refresh: an element with data-fragment is reloaded from that URL every few seconds
// (a list's first page, an unfinished workflow), while the "live" box, if any, is ticked.
(function () {
  const seconds = parseFloat(document.body.dataset.refresh || "5");
  const box = document.getElementById("live");
  document.querySelectorAll("[data-fragment]").forEach(function (element) {
    setInterval(async function () {
      if (box && !box.checked) return;
      if (element.querySelector("details[open]:not(.error details)")) return; // being read
      const response = await fetch(element.dataset.fragment, { credentials: "same-origin" });
      if (response.ok) element.innerHTML = await response.text();
    }, seconds * 1000);
  });
})();

// The queue charts: one line per queue, from the samples the dashboard keeps.
function durableCharts(url) {
  const seconds = parseFloat(document.body.dataset.refresh || "5");
  const charts = {};
  const palette = ["#2d5fd3", "#d35a2d", "#2da05f", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"];

  function draw(key, element, data) {
    const series = [{}].concat(data.queues.map(function (queue, i) {
      return { label: queue, stroke: palette[i % palette.length], width: 2, spanGaps: false };
    }));
    const values = [data.times].concat(data.queues.map(function (q) { return data[key][q]; }));
    const signature = data.queues.join("\u0000");
    if (charts[key] && charts[key].signature === signature) {
      charts[key].plot.setData(values);
      return;
    }
    if (charts[key]) charts[key].plot.destroy();
    const width = element.clientWidth - 16;
    const plot = new uPlot({ width: width, height: 240, series: series, scales: { x: { time: true } } }, values, element);
    charts[key] = { plot: plot, signature: signature };
  }

  function table(data) {
    const body = document.querySelector("#backlog tbody");
    body.innerHTML = "";
    data.queues.forEach(function (queue) {
      const now = data.now[queue] || {};
      const rate = data.throughput[queue];
      const row = document.createElement("tr");
      [queue, now.pending || 0, now.running || 0, now.waiting || 0,
       rate.length ? (rate[rate.length - 1] || 0).toFixed(2) : "0"].forEach(function (value) {
        const cell = document.createElement("td");
        cell.textContent = value;
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
  }

  async function tick() {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) return;
    const data = await response.json();
    table(data);
    draw("backlog", document.getElementById("backlog-chart"), data);
    const throughput = document.getElementById("throughput-chart");
    if (throughput) draw("throughput", throughput, data);
  }
  tick();
  setInterval(tick, seconds * 1000);
}

// The queue page's charts start by themselves (no inline script: the CSP allows none).
(function () {
  const chart = document.getElementById("backlog-chart");
  if (chart && chart.dataset.source) durableCharts(chart.dataset.source);
})();
