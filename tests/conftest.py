"""Test tree: unit/ mirrors the package's stages, contract/ checks the promises that span them
(streaming twins, causality, incremental analysis, the article's rules), integration/ drives the
CLI and the plugin in-process, e2e/ starts a real TensorBoard (and Chromium). Helpers live in
support/ (on the path through pyproject's `pythonpath`)."""

import os

# No test may reach a cloud metadata service (169.254.169.254) looking for credentials:
# Google's and AWS's clients probe it when nothing else is configured.
os.environ.setdefault("NO_GCE_CHECK", "true")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
