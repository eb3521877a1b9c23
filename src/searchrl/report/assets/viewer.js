// The trajectory viewer: reads the JSON block, fills the filters and the list, and renders
// one trajectory (segments coloured by role, retrieved documents expandable, Search-R2 cuts
// and regenerated suffixes marked). Data is only ever written with textContent.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("traj-data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };

  function fillSelect(select, values, label) {
    select.appendChild(new Option("all", ""));
    for (const v of values) select.appendChild(new Option(label ? label(v) : v, v));
  }
  const uniq = (key) => [...new Set(data.map((t) => t[key]).filter((v) => v !== null && v !== ""))];
  fillSelect($("f-source"), uniq("source"));
  fillSelect($("f-set"), uniq("set").sort());
  fillSelect($("f-hops"), uniq("hops").sort((a, b) => a - b).map(String));

  function matches(t) {
    const source = $("f-source").value, set = $("f-set").value, hops = $("f-hops").value;
    const correct = $("f-correct").value, refined = $("f-refined").value;
    const text = $("f-text").value.trim().toLowerCase();
    if (source && t.source !== source) return false;
    if (set && t.set !== set) return false;
    if (hops && String(t.hops) !== hops) return false;
    if (correct && String(t.em >= 1 ? 1 : 0) !== correct) return false;
    if (refined && !(t.refinement && t.refinement.revised)) return false;
    if (text && !t.question.toLowerCase().includes(text)) return false;
    return true;
  }

  function renderList() {
    const body = $("traj-list").querySelector("tbody");
    body.textContent = "";
    let shown = 0;
    data.forEach((t, index) => {
      if (!matches(t)) return;
      shown += 1;
      const row = el("tr");
      row.dataset.index = String(index);
      row.appendChild(el("td", "", t.source));
      row.appendChild(el("td", "", t.set));
      row.appendChild(el("td", "", t.hops === null ? "–" : t.hops));
      row.appendChild(el("td", t.em >= 1 ? "ok" : "bad", t.em >= 1 ? "✓" : "✗"));
      row.appendChild(el("td", "", t.searches.length));
      row.appendChild(el("td", "", t.question.length > 90 ? t.question.slice(0, 90) + "…" : t.question));
      row.addEventListener("click", () => select(index, row));
      body.appendChild(row);
    });
    $("f-count").textContent = shown + " of " + data.length + " trajectories";
  }

  // "Doc i(Title: T) text" lines inside an <information> block become expandable documents.
  const DOC_LINE = /^Doc (\d+)\(Title: (.*?)\) ([\s\S]*)$/;
  function renderEnv(node, text) {
    const open = text.indexOf("<information>"), close = text.lastIndexOf("</information>");
    if (open < 0) { node.appendChild(document.createTextNode(text)); return; }
    const body = text.slice(open + "<information>".length, close < 0 ? text.length : close);
    const lines = body.split("\n").filter((l) => l.trim());
    if (!lines.some((l) => DOC_LINE.test(l))) { node.appendChild(document.createTextNode(text)); return; }
    node.appendChild(document.createTextNode(text.slice(0, open + "<information>".length).trimStart()));
    for (const line of lines) {
      const m = DOC_LINE.exec(line);
      if (!m) { node.appendChild(el("div", "", line)); continue; }
      const doc = el("details", "doc");
      doc.appendChild(el("summary", "", "Doc " + m[1] + ": " + m[2]));
      doc.appendChild(el("div", "", m[3]));
      node.appendChild(doc);
    }
    if (close >= 0) node.appendChild(document.createTextNode(text.slice(close).trimEnd()));
  }

  function renderSearches(t, pane) {
    if (!t.searches.length) return;
    const box = el("details", "searches");
    box.appendChild(el("summary", "", "searches and retrieved documents (" + t.searches.length + ")"));
    t.searches.forEach((call, i) => {
      box.appendChild(el("div", "meta-line", (i + 1) + ". " + call.query));
      for (const id of call.doc_ids) {
        const doc = el("details", "doc");
        const contents = t.documents[id];
        doc.appendChild(el("summary", "", id + (contents ? ": " + contents.split("\n")[0] : "")));
        doc.appendChild(el("div", "", contents || "(text not stored)"));
        box.appendChild(doc);
      }
    });
    pane.appendChild(box);
  }

  function select(index, row) {
    for (const r of $("traj-list").querySelectorAll("tr.selected")) r.classList.remove("selected");
    row.classList.add("selected");
    const t = data[index];
    const pane = $("traj-detail");
    pane.textContent = "";
    pane.appendChild(el("h3", "", t.question));
    pane.appendChild(el("div", "meta-line", "gold: " + t.golden.join(" | ")));
    const verdict = el("div", "meta-line");
    verdict.appendChild(el("span", t.em >= 1 ? "ok" : "bad", t.em >= 1 ? "✓ correct" : "✗ wrong"));
    verdict.appendChild(document.createTextNode("  prediction: " + (t.prediction === null ? "(none)" : t.prediction)
      + " · F1 " + t.f1.toFixed(2) + " · " + t.searches.length + " searches · " + t.turns + " turns · stop: " + t.stop));
    pane.appendChild(verdict);
    const badges = el("div", "meta-line");
    for (const text of [t.source, t.set, t.hops === null ? "" : t.hops + " hops", t.method]) {
      if (text) badges.appendChild(el("span", "badge", text));
    }
    const ref = t.refinement;
    if (ref) badges.appendChild(el("span", "badge", ref.revised ? "Meta-Refiner: revised" : "Meta-Refiner: accepted"));
    pane.appendChild(badges);
    const prompt = el("details");
    prompt.appendChild(el("summary", "", "prompt"));
    prompt.appendChild(el("div", "seg role-env", t.prompt));
    pane.appendChild(prompt);
    const legend = el("div", "meta-line legend");
    for (const [cls, text] of [["role-policy", "policy (model)"], ["role-env", "env (search results, feedback)"], ["role-meta", "meta (refiner)"]]) {
      legend.appendChild(el("span", "seg " + cls, text));
    }
    pane.appendChild(legend);
    t.segments.forEach((seg, i) => {
      if (ref && ref.revised && i === ref.prefix_segments) {
        pane.appendChild(el("div", "cut", "✂ Meta-Refiner cut at step " + ref.cut_step
          + ": everything below was regenerated"));
      }
      const node = el("div", "seg segment role-" + seg.role);
      if (ref && ref.revised && i >= ref.prefix_segments) node.classList.add("regenerated");
      node.appendChild(el("span", "role-tag", seg.role + (node.classList.contains("regenerated") ? " · regenerated" : "")));
      if (seg.role === "env") renderEnv(node, seg.text); else node.appendChild(document.createTextNode(seg.text));
      pane.appendChild(node);
    });
    renderSearches(t, pane);
  }

  for (const id of ["f-source", "f-set", "f-hops", "f-correct", "f-refined"]) $(id).addEventListener("change", renderList);
  $("f-text").addEventListener("input", renderList);
  renderList();
})();
