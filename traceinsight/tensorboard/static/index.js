// The TraceInsight tab: TensorBoard loads this ES module in its plugin frame and calls render().
// A run picker, a progress state while the report is computed (the report routes answer 202), then the
// report page itself in a frame of the `report` route. No library, nothing loaded from elsewhere: run names
// are shown with textContent only.

const BASE = new URL("./", import.meta.url); // .../data/plugin/traceinsight/
const FIRST_POLL_MS = 400;
const MAX_POLL_MS = 2000;

const STYLE = `
  html, body { margin: 0; height: 100%; font: 14px/1.4 Roboto, "Helvetica Neue", Arial, sans-serif; color: #212121; }
  #ti-root { display: flex; flex-direction: column; height: 100%; }
  #ti-bar { display: flex; gap: 12px; align-items: center; padding: 8px 16px; border-bottom: 1px solid #e0e0e0;
            background: #fafafa; flex-wrap: wrap; }
  #ti-bar label { font-weight: 500; }
  #ti-bar select { max-width: 60ch; padding: 2px 4px; }
  #ti-bar a { color: #1565c0; }
  #ti-status { color: #616161; }
  #ti-status.error { color: #b71c1c; }
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
    this.picker = element("select", { id: "ti-run", "aria-label": "Profile run" });
    this.refresh = element("button", { id: "ti-refresh", type: "button" }, "Refresh");
    this.status = element("span", { id: "ti-status", role: "status" });
    this.open = element("a", { id: "ti-open", target: "_blank", rel: "noopener" }, "Open in a new tab");
    this.json = element("a", { id: "ti-json", target: "_blank", rel: "noopener" }, "JSON");
    this.wait = element("div", { id: "ti-wait" });
    this.waitText = element("div", {}, "Loading the runs…");
    this.wait.append(this.waitText, element("progress"));
    // No scripts run in the report (its CSP says so too); same-origin keeps its in-page links working.
    this.frame = element("iframe", { id: "ti-report", title: "TraceInsight report", sandbox: "allow-same-origin allow-popups" });
    this.frame.hidden = true;
    const bar = element("div", { id: "ti-bar" });
    bar.append(element("label", { for: "ti-run" }, "Run"), this.picker, this.refresh, this.status, this.open, this.json);
    root.append(bar, this.wait, this.frame);
    this.token = 0;
    this.picker.addEventListener("change", () => this.show(this.picker.value));
    this.refresh.addEventListener("click", () => this.loadRuns());
  }

  setStatus(text, isError = false) {
    this.status.textContent = text;
    this.status.classList.toggle("error", isError);
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
    const previous = this.picker.value;
    this.picker.replaceChildren(...runs.map((r) => element("option", { value: r.run }, r.run)));
    if (!runs.length) {
      this.token += 1;
      this.frame.hidden = true;
      this.wait.hidden = false;
      this.wait.lastChild.hidden = true;
      this.waitText.textContent =
        "No profile runs under this logdir yet: TraceInsight reads plugins/profile/<run>/*.xplane.pb " +
        "(TensorFlow, JAX) and *.pt.trace.json[.gz] (PyTorch). Press Refresh once a profile is written.";
      return;
    }
    const keep = runs.some((r) => r.run === previous) ? previous : runs[0].run;
    this.picker.value = keep;
    this.show(keep);
  }

  async show(run) {
    const token = ++this.token;
    const url = routeUrl("report", run);
    this.open.href = url;
    this.json.href = routeUrl("report.json", run);
    this.frame.hidden = true;
    this.wait.hidden = false;
    this.wait.lastChild.hidden = false;
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
      if (token !== this.token) return; // another run was picked meanwhile
      if (response.status === 200) {
        this.frame.src = url; // served from the plugin's cache
        this.frame.hidden = false;
        this.wait.hidden = true;
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
    this.wait.lastChild.hidden = true;
    this.waitText.textContent = `Could not analyze ${run}: ${message}`;
    this.setStatus("failed", true);
  }
}

export async function render() {
  document.head.append(element("style", {}, STYLE));
  const root = element("div", { id: "ti-root" });
  document.body.append(root);
  await new Tab(root).loadRuns();
}
