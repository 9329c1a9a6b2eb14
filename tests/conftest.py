"""Test tree: unit/ mirrors the package's stages, contract/ checks the promises that span them
(streaming twins, causality, incremental analysis, the article's rules), integration/ drives the
CLI and the plugin in-process, e2e/ starts a real TensorBoard (and Chromium). Helpers live in
support/ (on the path through pyproject's `pythonpath`)."""
