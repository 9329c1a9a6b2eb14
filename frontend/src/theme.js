// Light or dark, as TensorBoard shows it. TensorBoard's app toggles `dark-mode` on its own
// document's body (its dark-mode-supporter component: `document.body.classList.toggle("dark-mode",
// on)`), following its header toggle or the browser's preference. The plugin iframe is same-origin, so
// the parent's body is read and watched; when it cannot be (no parent, another origin), the
// browser's `prefers-color-scheme` decides.

/** The parent TensorBoard document's body, or null when there is none or it cannot be read. */
function parentBody(win) {
  try {
    if (!win.parent || win.parent === win) return null;
    const body = win.parent.document && win.parent.document.body;
    return body || null;
  } catch (e) {
    return null; // cross-origin parent: a SecurityError
  }
}

/**
 * Calls onChange('dark' | 'light') whenever the theme changes (not for the first value, which is
 * returned). Returns {theme, stop}.
 */
export function watchTheme(onChange, win = window) {
  const body = parentBody(win);
  const media = typeof win.matchMedia === 'function' ? win.matchMedia('(prefers-color-scheme: dark)') : null;
  const read = () => {
    if (body) return body.classList.contains('dark-mode') ? 'dark' : 'light';
    return media && media.matches ? 'dark' : 'light';
  };
  let theme = read();
  const check = () => {
    const now = read();
    if (now === theme) return;
    theme = now;
    onChange(now);
  };
  let observer = null;
  if (body && typeof win.MutationObserver === 'function') {
    observer = new win.MutationObserver(check);
    observer.observe(body, {attributes: true, attributeFilter: ['class']});
  }
  if (media && !body) {
    if (typeof media.addEventListener === 'function') media.addEventListener('change', check);
    else if (typeof media.addListener === 'function') media.addListener(check);
  }
  return {
    theme,
    stop() {
      if (observer) observer.disconnect();
      if (media && !body && typeof media.removeEventListener === 'function') media.removeEventListener('change', check);
    },
  };
}

/** Chart colours (canvas: CSS variables do not reach it) per theme. */
export const PALETTES = {
  light: {
    axis: '#616161', grid: '#eeeeee', tick: '#e0e0e0', text: '#212121', card: '#ffffff',
    train_loss: '#0077bb', val_loss: '#cc3311', grad_norm: '#0077bb', lr: '#33bbee', update_ratio: '#0077bb',
    gap: 'rgba(238, 51, 119, 0.20)', fit: '#c62828', fitBack: '#e69500', nonfinite: '#d32f2f',
    band: 'rgba(46, 125, 50, 0.08)', bandEdge: 'rgba(46, 125, 50, 0.35)', clip: '#6a1b9a',
  },
  dark: {
    axis: '#a0a4a8', grid: '#3c4043', tick: '#4a4e52', text: '#e8eaed', card: '#303134',
    train_loss: '#5ab4ff', val_loss: '#ff8a65', grad_norm: '#5ab4ff', lr: '#80deea', update_ratio: '#5ab4ff',
    gap: 'rgba(244, 143, 177, 0.22)', fit: '#ff6e6e', fitBack: '#ffb300', nonfinite: '#ff5252',
    band: 'rgba(129, 199, 132, 0.10)', bandEdge: 'rgba(129, 199, 132, 0.45)', clip: '#ce93d8',
  },
};

/** Sets the document's data-theme (style.css's dark variables hang off it). */
export function applyTheme(theme, doc = document) {
  doc.documentElement.setAttribute('data-theme', theme === 'dark' ? 'dark' : 'light');
}
