// The TraceInsight tab: TensorBoard loads this ES module in its plugin frame and calls render().
// First view: the runs table, as `traceinsight runs LOGDIR` prints it (same runs, order, names, columns and
// figures: the `runs` route reads them from the report cache the CLI shares). A name opens that run's report
// view: a progress state while the report is computed (the report routes answer 202), then the report page in
// a frame of the `report` route, with a way back to the table. No library, nothing loaded from elsewhere:
// everything from a trace is shown with textContent only.

const BASE = new URL("./", import.meta.url); // .../data/plugin/traceinsight/
const FIRST_POLL_MS = 400;
const MAX_POLL_MS = 2000;
// The columns of `traceinsight runs`' table (commands/runs.py `_HEADERS`); those right-aligned there too.
const HEADERS = [
  "run", "format", "framework", "files", "size", "hosts/ranks", "capture", "captured (UTC)", "steps",
  "mean step", "GPU-Util", "MFU", "top bottleneck", "step after fix",
];
const RIGHT = new Set(["files", "size", "steps", "mean step", "GPU-Util", "MFU", "step after fix"]);

const STYLE = `
  html, body { margin: 0; height: 100%; font: 14px/1.4 Roboto, "Helvetica Neue", Arial, sans-serif; color: #212121; }
  #ti-root { display: flex; flex-direction: column; height: 100%; }
  #ti-bar { display: flex; gap: 12px; align-items: center; padding: 8px 16px; border-bottom: 1px solid #e0e0e0;
            background: #fafafa; flex-wrap: wrap; }
  #ti-title { font-weight: 500; }
  #ti-bar a { color: #1565c0; }
  #ti-status { color: #616161; }
  #ti-status.error { color: #b71c1c; }
  #ti-table { flex: 1; overflow: auto; padding: 8px 16px; }
  #ti-runs { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  #ti-runs { font-size: 13px; }
  #ti-runs th, #ti-runs td { padding: 4px 8px; border-bottom: 1px solid #eeeeee; text-align: left; white-space: nowrap; }
  #ti-runs th { font-weight: 500; color: #424242; position: sticky; top: 0; background: #fff; }
  #ti-runs .num { text-align: right; }
  #ti-runs .error { color: #b71c1c; white-space: normal; }
  #ti-runs button.ti-name { border: 0; padding: 0; background: none; color: #1565c0; cursor: pointer; font: inherit;
                            text-align: left; text-decoration: underline; }
  #ti-hint { margin: 0 0 8px; color: #616161; }
  #ti-empty { padding: 48px 24px; text-align: center; color: #424242; }
  #ti-wait { padding: 48px 24px; text-align: center; color: #424242; }
  #ti-wait progress { width: 240px; display: block; margin: 12px auto; }
  #ti-report { flex: 1; border: 0; width: 100%; background: #fff; }
  [hidden] { display: none !important; }
`;

function element(tag, attributes = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

function routeUrl(route, run) {
  const url = new URL(route, BASE);
  if (run !== undefined) url.searchParams.set("run", run);
  return url.href;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// The figures as `traceinsight runs` writes them (report/format.py: fmt_ns, fmt_pct, fmt_bytes, fmt_count,
// fmt_iso, plural, escape_control), so the table reads the same in the terminal and here.

function toFixedEven(x, digits) {
  // x.toFixed(digits) as Python rounds: the double's exact value, a tie to the even neighbour (toFixed: away).
  const exact = x.toFixed(60);
  const cut = exact.indexOf(".") + 1 + digits;
  if (/^50*$/.test(exact.slice(cut))) {
    const down = exact.slice(0, cut).replace(/\.$/, "");
    if (Number(down[down.length - 1]) % 2 === 0) return down;
  }
  return x.toFixed(digits);
}

function trimZeros(text) {
  return text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
}

function g3(x) {
  // Python's format(x, ".3g").
  const exponent = Number(x.toExponential(2).split("e")[1]);
  if (exponent < -4 || exponent >= 3) {
    const [mantissa] = x.toExponential(2).split("e");
    const sign = exponent < 0 ? "-" : "+";
    return `${trimZeros(mantissa)}e${sign}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  return trimZeros(toFixedEven(x, 2 - exponent));
}

function thousands(x, digits = 0) {
  const [whole, fraction] = toFixedEven(x, digits).split(".");
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return fraction === undefined ? grouped : `${grouped}.${fraction}`;
}

const TIME_UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "\u00b5s"]];
const BYTE_UNITS = [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];

function fmtNs(ns) {
  if (ns === null || ns === undefined) return "-";
  for (const [scale, unit] of TIME_UNITS) {
    if (Math.abs(ns) >= scale) {
      return Math.abs(ns) < 100 * scale ? `${g3(ns / scale)} ${unit}` : `${thousands(ns / scale)} ${unit}`;
    }
  }
  return `${toFixedEven(ns, 0)} ns`;
}

function fmtPct(fraction) {
  return fraction === null || fraction === undefined ? "-" : `${toFixedEven(fraction * 100, 1)} %`;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "-";
  for (const [scale, unit] of BYTE_UNITS) if (Math.abs(n) >= scale) return `${g3(n / scale)} ${unit}`;
  return `${toFixedEven(n, 0)} B`;
}

function fmtCount(n) {
  return n === null || n === undefined ? "-" : thousands(n);
}

function fmtCaptured(moment) {
  if (!moment) return "-";
  return moment.endsWith("Z") ? moment.slice(0, 19).replace("T", " ") : moment;
}

function plural(n, noun) {
  return `${thousands(n)} ${noun}${n === 1 ? "" : "s"}`;
}

function escapeControl(text) {
  return text.replace(/[\x00-\x1f\x7f-\x9f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

function hostsRanks(row) {
  const parts = [[row.hosts, "host"], [row.ranks, "rank"]].filter(([n]) => n).map(([n, noun]) => plural(n, noun));
  return parts.join(", ") || "-";
}

// A row's cells, as `traceinsight runs` prints them (commands/runs.py `_cells`); a run not analysed yet: "-".
function cells(row) {
  const files = [escapeControl(row.name)];
  if (!row.analysed) {
    const bare = [...files, "-", "-", fmtCount(row.files), fmtBytes(row.bytes), "-"];
    // A run whose report could not be made here (an error, past the deadline): its error, as `traceinsight runs`.
    if (row.error) return [...bare, `error: ${escapeControl(row.error)}`];
    return [...bare, ...Array(8).fill("-")];
  }
  files.push(row.format || "-", row.framework || "-", fmtCount(row.files), fmtBytes(row.bytes), hostsRanks(row));
  if (row.error !== null && row.error !== undefined) return [...files, `error: ${escapeControl(row.error)}`];
  const top = row.top_bottleneck ? `${row.top_bottleneck} (${row.top_severity})` : "-";
  return [
    ...files,
    row.capture_kind || "-",
    fmtCaptured(row.capture_time),
    fmtCount(row.steps),
    fmtNs(row.mean_step_ns),
    fmtPct(row.gpu_util),
    fmtPct(row.mfu),
    escapeControl(top),
    fmtNs(row.top_step_ns_after),
  ];
}

// The line above the table: what clicking a run does, and where the dashes of runs not analysed yet go.
function hint(runs) {
  const waiting = runs.filter((row) => !row.analysed && !row.error).length;
  if (waiting === 0) return "Click a run to open its report.";
  const which =
    waiting === runs.length ? "No run is analysed yet" : `${waiting} of ${runs.length} runs are not analysed yet`;
  return `${which} (dashes): click a run to analyse it; its figures fill in here once its report is made ` +
    "(traceinsight runs LOGDIR analyses them all).";
}

function size(bytes) {
  if (bytes < 1e6) return `${Math.max(1, Math.round(bytes / 1e3))} KB`;
  return `${(bytes / 1e6).toFixed(bytes < 1e7 ? 1 : 0)} MB`;
}

function describeProgress(state) {
  const files = `${state.files} file${state.files === 1 ? "" : "s"}, ${size(state.bytes)}`;
  // A job is 'queued' for an instant before it starts; longer means the other workers are all busy.
  const what = state.state === "queued" && state.elapsed_s >= 1 ? "Waiting for a free worker" : "Analysing";
  return `${what}: ${files}, ${Math.round(state.elapsed_s)} s`;
}

class Tab {
  constructor(root) {
    this.back = element("button", { id: "ti-back", type: "button" }, "\u2190 All runs");
    this.title = element("span", { id: "ti-title" }, "Runs, newest first");
    this.refresh = element("button", { id: "ti-refresh", type: "button" }, "Refresh");
    this.status = element("span", { id: "ti-status", role: "status" });
    this.open = element("a", { id: "ti-open", target: "_blank", rel: "noopener" }, "Open in a new tab");
    this.json = element("a", { id: "ti-json", target: "_blank", rel: "noopener" }, "JSON");
    const bar = element("div", { id: "ti-bar" });
    bar.append(this.back, this.title, this.refresh, this.status, this.open, this.json);

    this.table = element("div", { id: "ti-table" });
    this.rows = element("tbody");
    const runs = element("table", { id: "ti-runs" });
    const head = element("tr");
    head.append(...HEADERS.map((h) => element("th", { scope: "col", class: RIGHT.has(h) ? "num" : "" }, h)));
    const thead = element("thead");
    thead.append(head);
    runs.append(thead, this.rows);
    this.empty = element(
      "div",
      { id: "ti-empty" },
      "No profile runs under this logdir yet: TraceInsight reads plugins/profile/<run>/*.xplane.pb " +
        "(TensorFlow, JAX) and *.pt.trace.json[.gz] (PyTorch). Press Refresh once a profile is written.",
    );
    // What a click does: the table opens with dashes for every run no report was made of yet.
    this.hint = element("p", { id: "ti-hint" });
    this.table.append(this.hint, runs, this.empty);

    this.wait = element("div", { id: "ti-wait" });
    this.waitText = element("div", {}, "Loading the runs…");
    this.progress = element("progress");
    this.wait.append(this.waitText, this.progress);
    // No scripts run in the report (its CSP says so too); same-origin keeps its in-page links working.
    this.frame = element("iframe", { id: "ti-report", title: "TraceInsight report", sandbox: "allow-same-origin allow-popups" });
    root.append(bar, this.table, this.wait, this.frame);
    this.token = 0;
    this.back.addEventListener("click", () => this.showTable());
    this.refresh.addEventListener("click", () => (this.run === undefined ? this.loadRuns() : this.show(this.run)));
  }

  setStatus(text, isError = false) {
    this.status.textContent = text;
    this.status.classList.toggle("error", isError);
  }

  // The first view: the runs table (figures refreshed: a report finished meanwhile is in the cache now).
  showTable() {
    this.token += 1; // stop polling a report
    this.run = undefined;
    this.title.textContent = "Runs, newest first";
    this.back.hidden = this.open.hidden = this.json.hidden = true;
    this.frame.hidden = this.wait.hidden = true;
    this.frame.src = "about:blank"; // the report page unloaded
    this.table.hidden = false;
    this.setStatus("");
    return this.loadRuns();
  }

  async loadRuns() {
    let runs;
    try {
      const response = await fetch(routeUrl("runs"));
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      runs = await response.json();
    } catch (error) {
      this.setStatus(`Could not list the runs: ${error.message}`, true);
      return;
    }
    this.rows.replaceChildren(...runs.map((row) => this.tableRow(row)));
    this.empty.hidden = runs.length > 0;
    this.hint.hidden = runs.length === 0;
    this.hint.textContent = hint(runs);
  }

  tableRow(row) {
    const line = element("tr", { "data-run": row.name });
    const texts = cells(row);
    texts.forEach((text, i) => {
      const cell = element("td", { class: RIGHT.has(HEADERS[i]) ? "num" : "" });
      if (i === 0) {
        const name = element("button", { type: "button", class: "ti-name", title: "Open the report" }, text);
        name.addEventListener("click", () => this.show(row.name));
        cell.append(name);
      } else {
        cell.textContent = text;
      }
      if (i === texts.length - 1 && texts.length < HEADERS.length) {
        cell.className = "error"; // a run that could not be analysed: its error runs to the end of the row
        cell.colSpan = HEADERS.length - i;
      }
      line.append(cell);
    });
    return line;
  }

  async show(run) {
    const token = ++this.token;
    this.run = run;
    const url = routeUrl("report", run);
    this.title.textContent = run;
    this.back.hidden = this.open.hidden = this.json.hidden = false;
    this.open.href = url;
    this.json.href = routeUrl("report.json", run);
    this.table.hidden = this.frame.hidden = true;
    this.wait.hidden = this.progress.hidden = false;
    this.waitText.textContent = `Analysing ${run}…`;
    this.setStatus("");
    let delay = FIRST_POLL_MS;
    while (token === this.token) {
      let response;
      try {
        response = await fetch(url, { headers: { Accept: "text/html,application/json" } });
      } catch (error) {
        this.fail(run, error.message);
        return;
      }
      if (token !== this.token) return; // back to the table, or another run, meanwhile
      if (response.status === 200) {
        this.frame.src = url; // served from the plugin's cache
        this.frame.hidden = false;
        this.wait.hidden = true;
        this.loadRuns(); // its figures, for the table behind
        return;
      }
      let state = {};
      try {
        state = await response.json();
      } catch (error) {
        state = { error: `HTTP ${response.status}` };
      }
      if (response.status !== 202) {
        this.fail(run, state.error || `HTTP ${response.status}`);
        return;
      }
      this.waitText.textContent = `${describeProgress(state)} (${run})`;
      await sleep(delay);
      delay = Math.min(MAX_POLL_MS, delay * 1.5);
    }
  }

  fail(run, message) {
    this.progress.hidden = true;
    this.waitText.textContent = `Could not analyze ${run}: ${message}`;
    this.setStatus("failed", true);
  }
}

export async function render() {
  document.head.append(element("style", {}, STYLE));
  const root = element("div", { id: "ti-root" });
  document.body.append(root);
  await new Tab(root).showTable();
}
