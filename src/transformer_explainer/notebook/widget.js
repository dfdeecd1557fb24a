// The notebook widget's front end (anywidget): the snapshot page of the trace, in a sandboxed iframe.
// The page carries the app and the data itself, so nothing is fetched from anywhere, and the app's
// styles stay inside the frame instead of mixing with the notebook's.
function render({ model, el }) {
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.setAttribute("title", "Transformer Explainer");
  frame.style.cssText = "width: 100%; border: 1px solid #e2e2ea; border-radius: 6px; background: #f3f3f7;";
  const update = () => {
    frame.style.height = `${model.get("height")}px`;
    frame.srcdoc = model.get("html");
  };
  const resize = () => { frame.style.height = `${model.get("height")}px`; };
  update();
  model.on("change:html", update);
  model.on("change:height", resize);
  el.appendChild(frame);
  return () => {
    model.off("change:html", update);
    model.off("change:height", resize);
  };
}

export default { render };
