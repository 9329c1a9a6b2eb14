// The only way this tab builds DOM: elements with textContent and attributes, never innerHTML.
// Run names, tag names and messages come from the logdir and are attacker-controlled.

/**
 * el('div', {class: 'x', text: 'hello', attrs: {'data-run': r}, title: t, on: {click: f}}, children)
 */
export function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  const {class: cls, text, attrs, on, title, style} = props;
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (title !== undefined && title !== null) node.title = String(title);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      node.setAttribute(k, v === true ? '' : String(v));
    }
  }
  if (style) for (const [k, v] of Object.entries(style)) node.style.setProperty(k, v);
  if (on) for (const [k, f] of Object.entries(on)) node.addEventListener(k, f);
  for (const c of [].concat(children)) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}
