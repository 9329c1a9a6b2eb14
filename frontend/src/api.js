// The plugin's HTTP routes. Relative URLs only: the page lives at .../data/plugin_entry.html with a
// <base href="plugin/crash_signals/">, behind any path prefix or /experiment/<id>/.

/** A non-200 response; `message` is the server's text/plain body. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

/** Route URLs, relative to the plugin's base. */
export function routeUrl(route, params = {}) {
  const q = Object.entries(params)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join('&');
  return `./${route}${q ? `?${q}` : ''}`;
}

/** Client over `fetchImpl` (window.fetch in the page, a fake in tests). */
export function makeApi(fetchImpl) {
  async function getJSON(url) {
    let res;
    try {
      res = await fetchImpl(url, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
    } catch (e) {
      throw new ApiError(`cannot reach TensorBoard (${e && e.message ? e.message : e})`, 0);
    }
    if (!res.ok) {
      let text = '';
      try {
        text = (await res.text()).trim();
      } catch (e) {
        text = '';
      }
      throw new ApiError(text || `HTTP ${res.status}`, res.status);
    }
    try {
      return await res.json();
    } catch (e) {
      throw new ApiError(`malformed response from ${url}`, res.status);
    }
  }
  return {
    runs: () => getJSON(routeUrl('runs')),
    analysis: (run) => getJSON(routeUrl('analysis', {run})),
    rules: () => getJSON(routeUrl('rules')),
    sweep: () => getJSON(routeUrl('sweep')), // sweep view (sweep.js)
  };
}
