// inferscope report: draws the embedded report.json as tables and SVG charts. No network, no
// libraries: everything the page needs is in this file and the JSON block above it.
(function () {
  'use strict';
  var SVGNS = 'http://www.w3.org/2000/svg';
  var CAUSE_COLORS = {
    kv_cache: '#d62728', gpu_memory: '#9467bd', gpu_throttle: '#f7b6d2', queue: '#ff7f0e', compute: '#17becf', cpu_runqueue: '#8c564b',
    network: '#1f77b4', loadgen: '#555555', vector_index: '#2ca02c', errors: '#e377c2',
    unexplained: '#bcbd22', none: '#b8bfcc'
  };
  var W = 920, H = 240, M = { l: 56, r: 16, t: 18, b: 28 };

  var report = JSON.parse(document.getElementById('report-data').textContent);
  var app = document.getElementById('app');
  var windows = report.timeline.windows;
  var t0 = report.timeline.origin_unix_ms;
  var verdictAt = {};
  report.verdicts.forEach(function (v) { verdictAt[v.index] = v; });

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }
  function sv(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function num(v) {
    if (v === null || v === undefined || !isFinite(v)) { return 'n/a'; }
    var a = Math.abs(v);
    if (a < 0.005) { return '0'; }
    if (a >= 100 || v === Math.round(v)) { return v.toFixed(0); }
    return a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function chip(cause) {
    var c = el('span', { 'class': 'chip ' + cause }, cause);
    if (cause !== 'none') { c.style.background = CAUSE_COLORS[cause]; }
    return c;
  }
  function evidenceLine(ev) {
    return ev.map(function (e) {
      var b = (e.baseline === undefined || e.baseline === null) ? '' : ', baseline ' + num(e.baseline);
      return e.signal + '=' + num(e.value) + ' (' + e.note + b + ')';
    }).join('; ');
  }
  function section(title) {
    var s = el('section');
    s.appendChild(el('h2', {}, title));
    app.appendChild(s);
    return s;
  }

  // ---- run header, missing evidence, phases ----
  var head = document.getElementById('run-meta');
  var secs = (report.run.end_unix_ms - report.run.start_unix_ms) / 1000;
  head.textContent = 'scenario ' + report.run.scenario + ' against ' + report.run.target + ' · ' +
    new Date(report.run.start_unix_ms).toISOString() + ' · ' + num(secs) + ' s · ' +
    report.run.window_ms + ' ms windows · inferscope ' + report.run.inferscope_version;

  if (report.missing_evidence.length) {
    var ms = section('Missing evidence');
    var ul = el('ul', { 'class': 'missing' });
    report.missing_evidence.forEach(function (m) { ul.appendChild(el('li', {}, m)); });
    ms.appendChild(ul);
  }

  var ps = section('Phases');
  var table = el('table', { id: 'phase-table' });
  var hr = el('tr');
  ['phase', 'load', 'TTFT p50 / p99', 'ITL p99', 'verdict', 'evidence and what to do', 'latency increase']
    .forEach(function (h) { hr.appendChild(el('th', {}, h)); });
  table.appendChild(hr);
  report.phases.forEach(function (p) {
    var tr = el('tr', { 'class': 'phase-row', 'data-phase': p.name, 'data-verdict': p.dominant });
    tr.appendChild(el('td', {}, p.name + ' (' + p.windows + ' windows)'));
    var target = (p.load.target_rps === null || p.load.target_rps === undefined) ? '' : ' of ' + num(p.load.target_rps);
    var ltd = el('td', {}, num(p.load.achieved_rps) + target + ' req/s, ' + p.load.errors + ' errors');
    // Energy per output token and per request where NVML's energy counter was read.
    if (p.energy) {
      var e = p.energy, parts = [num(e.joules) + ' J'];
      if (e.joules_per_output_token !== null && e.joules_per_output_token !== undefined) {
        parts.push(num(e.joules_per_output_token) + ' J/token (' + num(e.output_tokens_per_joule) + ' tokens/J)');
      }
      if (e.joules_per_request !== null && e.joules_per_request !== undefined) { parts.push(num(e.joules_per_request) + ' J/request'); }
      ltd.appendChild(el('div', { 'class': 'energy' }, parts.join(', ')));
    }
    tr.appendChild(ltd);
    var tt = p.latency.ttft_ms, itl = p.latency.itl_ms;
    tr.appendChild(el('td', {}, tt ? num(tt.p50) + ' / ' + num(tt.p99) + ' ms' : 'n/a'));
    tr.appendChild(el('td', {}, itl ? num(itl.p99) + ' ms' : 'n/a'));
    var vtd = el('td');
    var named = (p.causes && p.causes.length > 1) ? p.causes : [{ cause: p.dominant }];
    named.forEach(function (c, i) {
      if (i > 0) { vtd.appendChild(document.createTextNode(' + ')); }
      vtd.appendChild(chip(c.cause));
      if (c.part !== undefined) { vtd.appendChild(document.createTextNode(' ' + Math.round(c.part * 100) + '%')); }
    });
    if (p.dominant !== 'none') { vtd.appendChild(el('div', {}, 'score ' + num(p.confidence))); }
    if (p.dominant !== 'none' && p.runners_up && p.runners_up.length) {
      var r = p.runners_up[0];
      var why = r.explained_by ? 'explained by ' + r.explained_by
        : (named.some(function (c) { return c.cause === r.cause; }) ? 'named too' : 'lower score');
      vtd.appendChild(el('div', { 'class': 'runner-up' }, 'runner-up ' + r.cause + ' ' + num(r.confidence) + ', ' + why));
    }
    vtd.appendChild(el('div', {}, p.shares.map(function (s) {
      return s.cause + ' ' + Math.round(s.share * 100) + '%';
    }).join(', ')));
    tr.appendChild(vtd);
    var etd = el('td');
    if (p.lag) {
      var said = p.lag.said.charAt(0).toUpperCase() + p.lag.said.slice(1) + '.';
      etd.appendChild(el('div', { 'class': p.untrustworthy ? 'warn' : 'evidence' }, said));
    }
    if (p.dominant !== 'none') {
      etd.appendChild(el('div', { 'class': 'evidence' }, evidenceLine(p.evidence)));
      etd.appendChild(el('div', { 'class': 'hint' }, 'What to do: ' + p.hint));
    }
    (p.missing_decisive || []).forEach(function (m) {
      etd.appendChild(el('div', { 'class': 'evidence missing-line' }, 'missing: ' + m));
    });
    tr.appendChild(etd);
    (p.marks || []).forEach(function (m) {
      etd.appendChild(el('div', { 'class': 'evidence' }, 'event: ' + m));
    });
    tr.appendChild(decompCell(p));
    table.appendChild(tr);
  });
  ps.appendChild(table);

  function decompCell(p) {
    var td = el('td');
    if (!p.decomposition) { td.textContent = 'baseline'; return td; }
    [p.decomposition, p.tail_decomposition].forEach(function (d) { if (d) { decompBar(td, d); } });
    if (p.hops) { hopsBar(td, p.hops); }
    return td;
  }

  // The rise split by hop of the pipeline behind the target (--service): one segment per hop.
  function hopsBar(td, h) {
    var HOP_COLORS = ['#1f77b4', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#bcbd22', '#17becf'];
    var parts = h.parts.map(function (p, i) {
      var colour = p.hop === 'orchestration' ? '#ff7f0e' : HOP_COLORS[i % HOP_COLORS.length];
      var label = p.hop + (p.hop !== 'orchestration' && p.cause !== 'none' ? ' (' + p.cause + ')' : '');
      return [label, p.part_ms, colour];
    }).concat([['rest', h.rest_ms, '#d5d9e0']]);
    var holder = h.holder ? 'hop ' + h.holder + ' holds it' : 'no hop holds it';
    td.appendChild(el('div', {}, 'hops: +' + num(h.rise_ms) + ' ms, ' + holder));
    var bar = el('div', { 'class': 'decomp hops', 'data-holder': h.holder || '' });
    parts.forEach(function (p) {
      if (p[1] > 0 && h.rise_ms > 0) {
        var seg = el('div', { title: p[0] + ' ' + num(p[1]) + ' ms' });
        seg.style.width = (100 * p[1] / h.rise_ms) + '%';
        seg.style.background = p[2];
        bar.appendChild(seg);
      }
    });
    td.appendChild(bar);
    td.appendChild(el('div', { 'class': 'evidence' }, parts.map(function (p) {
      return p[0] + ' ' + num(p[1]);
    }).join(', ')));
  }

  // One stacked bar per decomposition: the parts add up to the rise (netted, never negative).
  function decompBar(td, d) {
    var q = d.band ? d.band.quantile : 'p50';
    td.appendChild(el('div', {}, (d.metric === 'e2e' ? 'E2E ' : 'TTFT ') + q + ' ' + (d.increase_ms >= 0 ? '+' : '') + num(d.increase_ms) + ' ms'));
    var network = d.basis === 'requests'
      ? [['client -> server', d.to_server_ms, CAUSE_COLORS.network], ['server -> client', d.to_client_ms, '#8c6bb1']]
      : [['network', d.network_ms, CAUSE_COLORS.network]];
    var parts = [['loadgen lag', d.loadgen_lag_ms, CAUSE_COLORS.loadgen]].concat([network[0]],
      [['cpu wait', d.cpu_scheduling_ms, CAUSE_COLORS.cpu_runqueue], ['queue', d.queue_ms, CAUSE_COLORS.queue],
        ['server compute', d.server_compute_ms, '#17becf']], network.slice(1), [['unexplained', d.unexplained_ms, '#d5d9e0']]);
    var total = parts.reduce(function (a, p) { return a + Math.max(0, p[1] || 0); }, 0);
    var bar = el('div', { 'class': 'decomp', 'data-quantile': q });
    var text = [];
    parts.forEach(function (p) {
      if (p[1] === null || p[1] === undefined) { return; }
      text.push(p[0] + ' ' + num(p[1]));
      if (total > 0 && p[1] > 0) {
        var seg = el('div', { title: p[0] + ' ' + num(p[1]) + ' ms' });
        seg.style.width = (100 * p[1] / total) + '%';
        seg.style.background = p[2];
        bar.appendChild(seg);
      }
    });
    td.appendChild(bar);
    td.appendChild(el('div', { 'class': 'evidence' }, text.join(', ') + ' (sum ' + num(total) + ')'));
  }

  // ---- time-series charts with verdict bands ----
  var xMax = windows.length ? (windows[windows.length - 1].start_unix_ms + windows[windows.length - 1].len_ms - t0) / 1000 : 1;
  function ticks(max, n) {
    if (!(max > 0)) { return [0]; }
    var step = Math.pow(10, Math.floor(Math.log10(max / n)));
    [1, 2, 5, 10].some(function (m) { if (max / (step * m) <= n) { step *= m; return true; } return false; });
    var out = [];
    for (var v = 0; v <= max + 1e-9; v += step) { out.push(v); }
    return out;
  }

  function figure(id, title, unit) {
    var fig = el('figure', { 'class': 'chart', id: id, 'data-points': '0' });
    fig.appendChild(el('figcaption', {}, title + (unit ? ' (' + unit + ')' : '')));
    app.appendChild(fig);
    return fig;
  }

  function noData(fig, why) {
    fig.appendChild(el('p', { 'class': 'nodata' }, 'no data: ' + why));
  }

  // series: [{name, color, get(window) -> number|null}]
  function timeChart(id, title, unit, series, opts) {
    opts = opts || {};
    var fig = figure(id, title, unit);
    var data = series.map(function (s) {
      return windows.map(function (w) {
        var v = s.get(w);
        return (v === null || v === undefined || !isFinite(v)) ? null : [(w.start_unix_ms - t0 + w.len_ms / 2) / 1000, v];
      });
    });
    var points = data.reduce(function (a, d) { return a + d.filter(function (p) { return p; }).length; }, 0);
    fig.setAttribute('data-points', String(points));
    if (!points) { noData(fig, opts.why || 'this source was off'); return fig; }
    var yMax = opts.yMax || 0;
    data.forEach(function (d) { d.forEach(function (p) { if (p && p[1] > yMax) { yMax = p[1]; } }); });
    yMax = yMax > 0 ? (opts.yMax || yMax * 1.1) : 1;
    var svg = sv('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
    var x = function (v) { return M.l + (W - M.l - M.r) * v / xMax; };
    var y = function (v) { return H - M.b - (H - M.t - M.b) * v / yMax; };
    // Verdict bands behind everything.
    var bands = sv('g', { 'class': 'bands' }, svg);
    windows.forEach(function (w, i) {
      var v = verdictAt[i];
      if (!v || v.verdict.cause === 'none') { return; }
      var r = sv('rect', { x: x((w.start_unix_ms - t0) / 1000), y: M.t, width: Math.max(1, x(w.len_ms / 1000) - M.l),
        height: H - M.t - M.b, fill: CAUSE_COLORS[v.verdict.cause], 'fill-opacity': 0.16, 'class': 'band',
        'data-cause': v.verdict.cause }, bands);
      sv('title', {}, r).textContent = v.verdict.cause + ' (confidence ' + num(v.verdict.confidence) + '): ' + evidenceLine(v.verdict.evidence);
    });
    var ax = sv('g', { 'class': 'axis' }, svg);
    ticks(yMax, 4).forEach(function (t) {
      sv('line', { x1: M.l, x2: W - M.r, y1: y(t), y2: y(t), 'class': 'grid' }, ax);
      sv('text', { x: M.l - 6, y: y(t) + 4, 'text-anchor': 'end' }, ax).textContent = num(t);
    });
    ticks(xMax, 10).forEach(function (t) {
      sv('text', { x: x(t), y: H - 8, 'text-anchor': 'middle' }, ax).textContent = num(t) + 's';
    });
    // Phase boundaries.
    var last = null;
    windows.forEach(function (w) {
      if (w.phase && w.phase !== last) {
        var px = x((w.start_unix_ms - t0) / 1000);
        sv('line', { x1: px, x2: px, y1: M.t, y2: H - M.b, 'class': 'phase-line' }, svg);
        sv('text', { x: px + 3, y: M.t - 5, 'class': 'phase-label' }, svg).textContent = w.phase;
      }
      last = w.phase;
    });
    data.forEach(function (d, si) {
      var runs = [[]];
      d.forEach(function (p) { if (p) { runs[runs.length - 1].push(p); } else if (runs[runs.length - 1].length) { runs.push([]); } });
      runs.forEach(function (run) {
        if (!run.length) { return; }
        var line = sv('polyline', { points: run.map(function (p) { return x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1); }).join(' '),
          fill: 'none', stroke: series[si].color, 'stroke-width': 2, 'class': 'series', 'data-series': series[si].name }, svg);
        if (series[si].dash) { line.setAttribute('stroke-dasharray', series[si].dash); }
        if (run.length === 1) { sv('circle', { cx: x(run[0][0]), cy: y(run[0][1]), r: 3, fill: series[si].color }, svg); }
      });
      // A series that explains its points (how many a censored point stands for) titles each.
      if (series[si].title) {
        d.forEach(function (p, wi) {
          if (!p) { return; }
          var c = sv('circle', { cx: x(p[0]), cy: y(p[1]), r: 3, fill: series[si].color, 'class': 'censored' }, svg);
          sv('title', {}, c).textContent = series[si].title(windows[wi]);
        });
      }
    });
    if (opts.markers) { opts.markers(svg, x, y, yMax); }
    fig.appendChild(svg);
    legend(fig, series);
    return fig;
  }

  function legend(fig, series, noVerdicts) {
    var lg = el('div', { 'class': 'legend' });
    series.forEach(function (s) {
      var sp = el('span');
      var i = el('i'); i.style.background = s.color;
      sp.appendChild(i); sp.appendChild(document.createTextNode(s.name));
      lg.appendChild(sp);
    });
    var seen = {};
    if (noVerdicts) { fig.appendChild(lg); return; }
    report.verdicts.forEach(function (v) { seen[v.verdict.cause] = true; });
    Object.keys(CAUSE_COLORS).forEach(function (c) {
      if (!seen[c] || c === 'none') { return; }
      var sp = el('span');
      var i = el('i'); i.style.background = CAUSE_COLORS[c]; i.style.opacity = 0.35;
      sp.appendChild(i); sp.appendChild(document.createTextNode('verdict ' + c));
      lg.appendChild(sp);
    });
    fig.appendChild(lg);
  }

  function q(w, key, p) { return w.load && w.load[key] ? w.load[key][p] : null; }
  function get(w, src, key) { return w[src] && w[src][key] !== undefined ? w[src][key] : null; }

  timeChart('chart-latency', 'Latency percentiles over time, with verdict bands', 'ms', [
    { name: 'TTFT p50', color: '#1f77b4', get: function (w) { return q(w, 'ttft_ms', 'p50'); } },
    { name: 'TTFT p99', color: '#d62728', get: function (w) { return q(w, 'ttft_ms', 'p99'); } },
    { name: 'ITL p99', color: '#2ca02c', get: function (w) { return q(w, 'itl_ms', 'p99'); } },
    { name: 'send lag p99', color: '#555555', get: function (w) { return q(w, 'send_lag_ms', 'p99'); } },
    // Requests that timed out have no first token to plot: censored at the timeout, they waited
    // at least as long as their whole exchange (its p99 in a window where they time out).
    { name: 'timed out (waited at least)', color: '#7f7f7f', dash: '6 4', get: function (w) {
      var t = w.load && w.load.error_classes && w.load.error_classes.timeout;
      return t ? q(w, 'e2e_ms', 'p99') : null;
    }, title: function (w) {
      return w.load.error_classes.timeout + ' of ' + w.load.requests + ' requests timed out, no answer before the timeout';
    } }
  ], { why: 'no load generator records' });

  // Vector search and plain HTTP have no tokens: their latency is end to end, per endpoint.
  function e2eOf(endpoint, p) {
    return function (w) { return w.load && w.load.endpoint === endpoint ? q(w, 'e2e_ms', p) : null; };
  }
  timeChart('chart-e2e', 'Vector-search and plain-HTTP latency (end to end), with verdict bands', 'ms', [
    { name: 'vector search E2E p50', color: '#17becf', get: e2eOf('vector_search', 'p50') },
    { name: 'vector search E2E p99', color: '#9467bd', get: e2eOf('vector_search', 'p99') },
    { name: 'HTTP E2E p50', color: '#bcbd22', get: e2eOf('http', 'p50') },
    { name: 'HTTP E2E p99', color: '#8c564b', get: e2eOf('http', 'p99') }
  ].filter(function (s) { return windows.some(function (w) { var v = s.get(w); return v !== null && v !== undefined; }); }),
  { why: 'no vector-search or plain-HTTP requests' });

  timeChart('chart-kv', 'KV-cache usage', '0..1', [
    { name: 'KV usage', color: '#d62728', get: function (w) { return get(w, 'server', 'kv_usage'); } }
  ], { yMax: 1, why: 'no server metrics (KV usage not exported or /metrics not scraped)' });

  timeChart('chart-runq', 'Run-queue delay', 'µs', [
    { name: 'server p99', color: '#8c564b', get: function (w) { return w.runq && w.runq.samples > 0 ? w.runq.p99_us : null; } },
    { name: 'server mean', color: '#e377c2', get: function (w) { return w.runq && w.runq.samples > 0 ? w.runq.mean_us : null; } },
    { name: 'load generator p99', color: '#555555', get: function (w) { return get(w, 'runq', 'loadgen_p99_us'); } }
  ], { why: 'scheduler probes off (needs root)' });

  var haveNvml = windows.some(function (w) { return w.gpu && w.gpu.mem_used_frac !== null && w.gpu.mem_used_frac !== undefined; });
  timeChart('chart-gpu', haveNvml ? 'GPU memory used (NVML), OOM returns marked' : 'GPU memory held by the server (CUDA uprobes), OOM returns marked',
    haveNvml ? '%' : 'GiB', [
      haveNvml
        ? { name: 'device memory used', color: '#9467bd', get: function (w) { var f = get(w, 'gpu', 'mem_used_frac'); return f === null ? null : f * 100; } }
        : { name: 'live bytes', color: '#9467bd', get: function (w) { return w.gpu ? w.gpu.live_bytes / 1073741824 : null; } }
    ], { yMax: haveNvml ? 100 : 0, why: 'no GPU signals (CUDA uprobes off, no NVML)',
      markers: function (svg, x, y, yMax) {
        windows.forEach(function (w) {
          if (!w.gpu || !w.gpu.oom) { return; }
          var c = sv('circle', { cx: x((w.start_unix_ms - t0 + w.len_ms / 2) / 1000), cy: y(yMax * 0.95), r: 4, fill: '#d62728', 'class': 'oom' }, svg);
          sv('title', {}, c).textContent = w.gpu.oom + ' OOM returns';
        });
      } });

  // Each GPU's SM clock (NVML), throttled windows and XIDs marked.
  var gpuIds = [];
  windows.forEach(function (w) {
    (w.gpu && w.gpu.devices || []).forEach(function (d) { if (gpuIds.indexOf(d.index) < 0) { gpuIds.push(d.index); } });
  });
  function gpuOf(w, i) {
    return (w.gpu && w.gpu.devices || []).filter(function (d) { return d.index === i; })[0] || null;
  }
  var GPU_COLORS = ['#17becf', '#9467bd', '#2ca02c', '#ff7f0e', '#1f77b4', '#8c564b', '#e377c2', '#bcbd22'];
  timeChart('chart-gpu-clocks', 'GPU SM clock (NVML); throttled windows and XIDs marked', 'MHz',
    gpuIds.map(function (i, k) {
      return { name: 'GPU ' + i + ' SM clock', color: GPU_COLORS[k % GPU_COLORS.length],
        get: function (w) { var d = gpuOf(w, i); return d ? d.sm_clock_mhz : null; } };
    }), { why: 'no NVML samples (no NVIDIA driver)',
      markers: function (svg, x, y, yMax) {
        windows.forEach(function (w) {
          var mid = x((w.start_unix_ms - t0 + w.len_ms / 2) / 1000);
          (w.gpu && w.gpu.devices || []).forEach(function (d) {
            if (!d.throttle_share) { return; }
            var c = sv('circle', { cx: mid, cy: y(yMax * 0.9), r: 4, fill: '#f7b6d2', 'class': 'throttle' }, svg);
            sv('title', {}, c).textContent = 'GPU ' + d.index + ' throttled ' + Math.round(d.throttle_share * 100) +
              '% of samples: ' + (d.throttle_reasons || []).join(', ');
          });
          (w.gpu && w.gpu.xid_events || []).forEach(function (e) {
            var c = sv('circle', { cx: mid, cy: y(yMax * 0.97), r: 4, fill: '#d62728', 'class': 'xid' }, svg);
            sv('title', {}, c).textContent = 'XID ' + (e.code === null || e.code === undefined ? '?' : e.code) +
              (e.gpu === undefined ? '' : ' on GPU ' + e.gpu) + ' (' + e.source + ')';
          });
        });
      } });

  // ---- every window's verdict, folded away ----
  (function windowTable() {
    var sec = section('Window verdicts');
    var det = el('details');
    det.appendChild(el('summary', {}, report.verdicts.length + ' windows: cause, confidence, evidence, runners-up'));
    var tb = el('table', { id: 'window-table' });
    var h = el('tr');
    ['t', 'phase', 'verdict', 'confidence', 'evidence', 'runners-up'].forEach(function (x) { h.appendChild(el('th', {}, x)); });
    tb.appendChild(h);
    report.verdicts.forEach(function (v) {
      var tr = el('tr', { 'class': 'window-row', 'data-verdict': v.verdict.cause });
      tr.appendChild(el('td', {}, num((v.start_unix_ms - t0) / 1000) + 's'));
      tr.appendChild(el('td', {}, v.phase || ''));
      var c = el('td'); c.appendChild(chip(v.verdict.cause)); tr.appendChild(c);
      tr.appendChild(el('td', {}, num(v.verdict.confidence)));
      tr.appendChild(el('td', { 'class': 'evidence' }, evidenceLine(v.verdict.evidence)));
      tr.appendChild(el('td', {}, v.verdict.runners_up.map(function (r) {
        return r.cause + ' ' + num(r.confidence);
      }).join(', ')));
      tb.appendChild(tr);
    });
    det.appendChild(tb);
    sec.appendChild(det);
  })();

  // ---- request waterfalls ----
  (function waterfalls() {
    var wf = report.waterfalls.slice(0, 60);
    var fig = figure('chart-waterfall', 'Request waterfalls (ms from intended start)', '');
    fig.setAttribute('data-points', String(wf.length));
    if (!wf.length) { noData(fig, 'no sampled requests'); return; }
    var stages = [
      ['send lag', '#555555', function (r) { return [0, r.sent_ms]; }],
      ['to server', '#aec7e8', function (r) { return r.server_received_ms === null || r.server_received_ms === undefined ? null : [r.sent_ms, r.server_received_ms]; }],
      ['server to first token', '#ff7f0e', function (r) {
        var from = r.server_received_ms !== null && r.server_received_ms !== undefined ? r.server_received_ms : r.sent_ms;
        var to = r.server_first_token_ms !== null && r.server_first_token_ms !== undefined ? r.server_first_token_ms : r.client_first_token_ms;
        return to === null || to === undefined ? null : [from, to];
      }],
      ['first token to client', '#1f77b4', function (r) {
        return r.server_first_token_ms === null || r.server_first_token_ms === undefined || r.client_first_token_ms === null || r.client_first_token_ms === undefined ? null : [r.server_first_token_ms, r.client_first_token_ms];
      }],
      ['streaming', '#2ca02c', function (r) {
        var from = r.client_first_token_ms !== null && r.client_first_token_ms !== undefined ? r.client_first_token_ms : r.sent_ms;
        return [from, r.end_ms];
      }]
    ];
    var row = 16, top = 8, left = 150, right = 16;
    var h = top + wf.length * row + 26;
    var end = wf.reduce(function (a, r) { return Math.max(a, r.end_ms); }, 1);
    var svg = sv('svg', { viewBox: '0 0 ' + W + ' ' + h, role: 'img' });
    var x = function (v) { return left + (W - left - right) * v / end; };
    var ax = sv('g', { 'class': 'axis' }, svg);
    ticks(end, 8).forEach(function (t) {
      sv('line', { x1: x(t), x2: x(t), y1: top, y2: h - 20, 'class': 'grid' }, ax);
      sv('text', { x: x(t), y: h - 6, 'text-anchor': 'middle' }, ax).textContent = num(t);
    });
    wf.forEach(function (r, i) {
      var yy = top + i * row;
      var slow = { slowest_e2e: ' slowest E2E', slowest_ttft: ' slowest TTFT' }[r.sample] || '';
      var label = '#' + r.request_id + (r.phase ? ' ' + r.phase : '') + slow;
      sv('text', { x: 4, y: yy + 11, 'class': 'phase-label' }, svg).textContent = label;
      var g = sv('g', { 'class': 'waterfall', 'data-request': r.request_id, 'data-sample': r.sample || 'uniform' }, svg);
      stages.forEach(function (s) {
        var span = s[2](r);
        if (!span || !(span[1] >= span[0])) { return; }
        var rect = sv('rect', { x: x(span[0]), y: yy + 2, width: Math.max(1, x(span[1]) - x(span[0])), height: row - 4, fill: s[1] }, g);
        sv('title', {}, rect).textContent = s[0] + ': ' + num(span[1] - span[0]) + ' ms';
      });
      (r.token_ms || []).forEach(function (t) {
        sv('line', { x1: x(t), x2: x(t), y1: yy + 2, y2: yy + row - 2, stroke: '#ffffff', 'stroke-opacity': 0.6 }, g);
      });
      var extra = [];
      if (r.runq_delay_ms !== null && r.runq_delay_ms !== undefined) { extra.push('run queue ' + num(r.runq_delay_ms) + ' ms (share of its windows)'); }
      if (r.gpu_sync_ms !== null && r.gpu_sync_ms !== undefined) { extra.push('gpu sync ' + num(r.gpu_sync_ms) + ' ms (share of its windows)'); }
      if (r.error) { extra.push('error: ' + r.error); }
      if (extra.length) { sv('title', {}, g).textContent = extra.join(', '); }
    });
    fig.appendChild(svg);
    legend(fig, stages.map(function (s) { return { name: s[0], color: s[1] }; }), true);
  })();

  document.body.setAttribute('data-rendered', 'ok');
})();
